"""The node runtime shared by every component: config, plugins, REST, pool, trust."""
