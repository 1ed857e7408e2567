"""The node: config, REST server, pool membership and the components it runs."""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
from pathlib import Path
from typing import Any

from .. import __version__
from ..protocol import node as proto
from ..protocol.base import to_wire
from . import plugins
from .auth import AuthError, CertificatePolicy, Verifier, authority, host_port, load_secret
from .client import Client
from .clock import SYSTEM_CLOCK, Clock
from .component import Component
from .config import REQUIRED, ConfigError, Field, Section, load_toml, positive, validate
from .gate import GateOptions
from .metrics import Registry
from .pool import Member, Pool
from .rest import HTTPError, Request, Response, RestApp, RestServer, Route

__all__ = ["Node", "load_config", "NODE_SCHEMA", "COMPONENT_GROUP"]

log = logging.getLogger("htda.node")

COMPONENT_GROUP = "htda.components"


def _listen_check(value: str) -> str | None:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        return "must be HOST:PORT, e.g. 127.0.0.1:8740"
    return None


def _alias_check(values: list[str]) -> str | None:
    for value in values:
        host, sep, port = value.rpartition(":") if not value.endswith("]") else ("", "", "")
        if not value or any(c in value for c in "/@ ,") or (sep and not (host and port.isdigit())):
            return f"must hold HOST or HOST:PORT names, not {value!r}"
    return None


def _patterns_check(values: list[str]) -> str | None:
    problems = [CertificatePolicy.problem(v) for v in values]
    return next((f"entry {p}" for p in problems if p), None)


def _url_list_check(values: list[str]) -> str | None:
    bad = [v for v in values if not v.startswith(("http://", "https://"))]
    return f"must hold http:// or https:// URLs, not {bad[0]!r}" if bad else None


NODE_SCHEMA = Section({
    "node": Field(Section({
        "name": Field(str, "", "node name, unique in the pool (default: the host name)"),
        "listen": Field(str, "127.0.0.1:8740", "address and port the REST server binds", check=_listen_check),
        "advertise_url": Field(str, "", "URL other members use to reach this node (default: from listen)"),
        "components": Field(list, REQUIRED, "components to run: coordinator, locator, cache"),
        "data_dir": Field(str, "var/htda", "state directory (relative paths: to the config file)"),
        "log_level": Field(str, "info", "debug, info, warning or error"),
        "threads": Field(int, 16, "REST worker threads", check=positive),
        "max_body": Field(int, 16 * 1024 * 1024, "largest accepted request body in bytes", check=positive),
        "aliases": Field(list, list, "other names clients reach this node by (HOST or HOST:PORT, e.g. behind a "
                                     "proxy): signatures addressed to them are accepted too", check=_alias_check),
        "header_timeout": Field(float, 5.0, "seconds a connection may take to send its request headers",
                                check=positive),
        "max_pending": Field(int, 1024, "connections that may wait for their request at once; beyond, the "
                                        "oldest is dropped", check=positive),
    })),
    "pool": Field(Section({
        "seeds": Field(list, list, "URLs of seed nodes to heartbeat to", check=_url_list_check),
        "secret_file": Field(str, "", "file holding the pool secret (mode 600); created if missing and "
                                      "create_secret is true"),
        "create_secret": Field(bool, False, "create secret_file with a random secret when it is missing"),
        "heartbeat_interval": Field(float, 5.0, "seconds between heartbeats", check=positive),
        "expiry": Field(float, 30.0, "seconds of silence after which a member is dropped", check=positive),
        "replay_window": Field(float, 30.0, "accepted clock skew / replay window of signed requests",
                               check=positive),
        "read_networks": Field(list, lambda: ["127.0.0.0/8", "::1/128"],
                               "networks that may use read-only queries without a signature"),
        "request_timeout": Field(float, 10.0, "total timeout of calls to other members", check=positive),
        "connect_timeout": Field(float, 2.0, "connect timeout of calls to other members", check=positive),
    })),
    "tls": Field(Section({
        "enabled": Field(bool, False, "serve and call over HTTPS"),
        "certificate": Field(str, "", "PEM certificate of this node"),
        "private_key": Field(str, "", "PEM private key of this node"),
        "ca_file": Field(str, "", "PEM CA bundle that signed the pool's certificates"),
        "verify_clients": Field(bool, False, "require client certificates signed by ca_file; a verified "
                                             "certificate on allowed_clients then authenticates like the "
                                             "pool secret"),
        "allowed_clients": Field(list, list, "client certificates that are pool members: cn:GLOB (subject "
                                             "common name), dns:GLOB (a SAN DNS name) or dn:SUBJECT",
                                 check=_patterns_check),
    })),
})


def load_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load and validate a node config; every problem names the file and key."""
    source = str(path)
    raw = load_toml(path)
    known = set(NODE_SCHEMA.fields) | set(plugins.available(COMPONENT_GROUP))
    fields = dict(NODE_SCHEMA.fields)
    for name in sorted(set(raw) - set(NODE_SCHEMA.fields)):
        if name not in known:
            raise ConfigError(f"{source}: unknown section '[{name}]' (known: {', '.join(sorted(known))})")
        fields[name] = Field(_component_class(name, source).config_schema, {})
    config = validate(raw, Section(fields), source)
    for name in config["node"]["components"]:
        if name not in known - set(NODE_SCHEMA.fields):
            raise ConfigError(f"{source}: 'node.components' names unknown component '{name}' "
                              f"(available: {', '.join(plugins.available(COMPONENT_GROUP))})")
        if name not in config:
            config[name] = validate({}, _component_class(name, source).config_schema, source, f"{name}.")
    _check_tls(config["tls"], source)
    if config["node"]["log_level"] not in ("debug", "info", "warning", "error"):
        raise ConfigError(f"{source}: 'node.log_level' must be one of debug, info, warning, error")
    config["_source"] = source
    return config


def config_dir(source: str) -> Path:
    """The folder relative paths of the config ``source`` are relative to."""
    return Path(source).resolve().parent if source != "<config>" else Path.cwd()


def config_path(base_dir: Path, value: str) -> Path:
    """A config path: absolute as given, relative to ``base_dir`` (the config file's folder) otherwise."""
    p = Path(value).expanduser()
    # normpath: logs and errors show /srv/htda/var, not /srv/htda/config/../var
    return p if p.is_absolute() else Path(os.path.normpath(base_dir / p))


def check_host(config: dict[str, Any]) -> None:
    """What start needs from this host beyond a valid config, checked before anything is created
    (``htda-node --check`` and start): a secret file that start will not create must exist."""
    source, pool = config["_source"], config["pool"]
    if not pool["secret_file"] or pool["create_secret"]:
        return
    path = config_path(config_dir(source), pool["secret_file"])
    if not path.exists():
        raise ConfigError(f"{source}: 'pool.secret_file' {path} does not exist (and 'pool.create_secret' is false)")


def _component_class(name: str, source: str) -> type[Component]:
    try:
        cls: type[Component] = plugins.load(COMPONENT_GROUP, name)
    except plugins.PluginError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return cls


def _check_tls(tls: dict[str, Any], source: str) -> None:
    if tls["enabled"]:
        for key in ("certificate", "private_key"):
            if not tls[key]:
                raise ConfigError(f"{source}: 'tls.{key}' is required when tls.enabled is true")
    if tls["verify_clients"] and not tls["ca_file"]:
        raise ConfigError(f"{source}: 'tls.ca_file' is required when tls.verify_clients is true")
    if tls["verify_clients"] and not tls["allowed_clients"]:
        raise ConfigError(f"{source}: 'tls.allowed_clients' is required when tls.verify_clients is true: list "
                          "the certificates that are pool members (e.g. [\"dns:*.pool.example.org\"]; "
                          "[\"cn:*\"] admits every certificate the CA signed)")
    if tls["allowed_clients"] and not tls["verify_clients"]:
        raise ConfigError(f"{source}: 'tls.allowed_clients' has no effect unless tls.verify_clients is true")


class Node:
    """One ``htda-node`` process: REST server, pool membership, components."""

    def __init__(self, config: dict[str, Any], clock: Clock = SYSTEM_CLOCK):
        self.config = config
        #: the clock components read (tests of components may pass another)
        self.clock = clock
        self.source = config.get("_source", "<config>")
        self.base_dir = config_dir(self.source)
        node, pool, tls = config["node"], config["pool"], self._resolve_tls(config["tls"])
        self.name = node["name"] or socket.gethostname()
        self.started = clock.time()
        self.version = __version__
        self.data_dir = self.path(node["data_dir"])
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.metrics = Registry()
        secret = self._secret(pool)
        self.client = Client(secret, connect_timeout=pool["connect_timeout"], timeout=pool["request_timeout"],
                             ca_file=tls["ca_file"] or None,
                             client_cert=tls["certificate"] if tls["enabled"] else None,
                             client_key=tls["private_key"] if tls["enabled"] else None)
        verifier = Verifier(secret, window=pool["replay_window"]) if secret else None
        self.app = RestApp(verifier, pool["read_networks"], node["max_body"], self.metrics,
                           trust_client_certs=tls["verify_clients"])
        host, _, port = node["listen"].rpartition(":")
        gate = GateOptions(header_timeout=node["header_timeout"], max_pending=node["max_pending"])
        self.server = RestServer(self.app, host.strip("[]"), int(port), threads=node["threads"], tls=tls, gate=gate)
        self.scheme = "https" if tls["enabled"] else "http"
        me = Member(self.name, node["advertise_url"], list(node["components"]), self.version, self.started)
        self.pool = Pool(me, pool["seeds"], self.client, pool["heartbeat_interval"], pool["expiry"],
                         info=self._heartbeat_info, roles=self.roles, on_join=self._joined, on_leave=self._left,
                         clock=clock)
        self.components: dict[str, Component] = {}
        for name in node["components"]:
            cls = plugins.load(COMPONENT_GROUP, name)
            self.components[name] = cls(self, config[name])
        me.roles = self.roles()
        self.app.add(self._routes())
        for component in self.components.values():
            self.app.add(component.routes())
        self._register_metrics()

    # -- helpers for components ----------------------------------------------
    def path(self, value: str) -> Path:
        """A config path: absolute as given, relative to the config file's folder otherwise."""
        return config_path(self.base_dir, value)

    @property
    def url(self) -> str:
        return self.pool.me.url

    # -- the interface components use (htda.node.component.NodeAPI) -------------------
    @property
    def heartbeat_interval(self) -> float:
        return float(self.pool.interval)

    @property
    def member_expiry(self) -> float:
        return float(self.pool.expiry)

    def pool_snapshot(self) -> list[dict[str, Any]]:
        return self.pool.snapshot()

    def component(self, name: str) -> Component | None:
        return self.components.get(name)

    def members(self, role: str | None = None) -> list[Member]:
        return self.pool.members(role)

    # -- life cycle ------------------------------------------------------------
    def start(self) -> None:
        """Serve, start the components, join the pool; a failure stops whatever started, then propagates
        (a half-started node would otherwise answer /healthz while a component is missing)."""
        self.server.start()
        started: list[Component] = []
        try:
            if not self.pool.me.url:
                host = self.config["node"]["listen"].rpartition(":")[0]
                if host in ("0.0.0.0", "::", "[::]"):
                    host = socket.getfqdn()
                self.pool.me.url = f"{self.scheme}://{host}:{self.server.port}"
            self.app.add_receivers(self._own_names())
            for component in self.components.values():
                component.start()
                started.append(component)
            self.pool.start()
        except BaseException:
            for component in reversed(started):
                try:
                    component.stop()
                except Exception:  # noqa: BLE001 - the start's own error is the one to report
                    log.exception("component %s failed to stop after a failed start", component.name)
            self.server.stop()
            raise
        log.info("node %s up at %s running %s (HTDA %s)", self.name, self.url,
                 ", ".join(self.components) or "no components", self.version)

    def stop(self) -> None:
        log.info("node %s stopping", self.name)
        self.pool.stop()
        for component in reversed(list(self.components.values())):
            try:
                component.stop()
            except Exception:  # noqa: BLE001 - stop the others regardless
                log.exception("component %s failed to stop cleanly", component.name)
        self.server.stop()

    # -- internals ---------------------------------------------------------------
    def _resolve_tls(self, tls: dict[str, Any]) -> dict[str, Any]:
        out = dict(tls)
        for key in ("certificate", "private_key", "ca_file"):
            if out[key]:
                out[key] = str(self.path(out[key]))
        return out

    def _own_names(self) -> set[str]:
        """Names beyond the listen address that signed requests may be addressed to: the URL, the aliases."""
        names = {authority(self.url)}
        for alias in self.config["node"]["aliases"]:
            host, sep, port = alias.rpartition(":")
            names.add(host_port(host, int(port)) if sep and port.isdigit() and not alias.endswith("]")
                      else host_port(alias, self.server.port))
        return names

    def _secret(self, pool: dict[str, Any]) -> bytes | None:
        if not pool["secret_file"]:
            log.warning("no pool secret configured: every state-changing request will be refused")
            return None
        path = self.path(pool["secret_file"])
        if not path.exists() and pool["create_secret"]:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(32) + "\n")
            log.info("created a new pool secret in %s", path)
        try:
            return load_secret(str(path))
        except FileNotFoundError:
            raise ConfigError(f"{self.source}: 'pool.secret_file' {path} does not exist") from None
        except (OSError, AuthError) as exc:
            raise ConfigError(f"{self.source}: 'pool.secret_file': {exc}") from None

    def _heartbeat_info(self) -> dict[str, Any]:
        info = {}
        for name, component in self.components.items():
            try:
                facts = component.heartbeat_info()
            except Exception:  # noqa: BLE001 - a component's bug must not stop heartbeats
                log.exception("component %s failed to give heartbeat info", name)
                continue
            if facts:
                info[name] = facts
        return info

    def _joined(self, member: Member) -> None:
        for component in self.components.values():
            component.on_member_joined(member)

    def _left(self, member: Member) -> None:
        for component in self.components.values():
            component.on_member_left(member)

    def _register_metrics(self) -> None:
        m = self.metrics
        m.gauge("htda_up", "1 while the node runs", callback=lambda: 1)
        m.gauge("htda_uptime_seconds", "seconds since the node started",
                callback=lambda: self.clock.time() - self.started)
        m.gauge("htda_pool_members", "live pool members seen by this node", callback=lambda: len(self.pool.members()))
        m.gauge("htda_heartbeats_sent", "heartbeats answered by seeds", callback=lambda: self.pool.heartbeats_sent)
        m.gauge("htda_heartbeat_failures", "heartbeats that failed", callback=lambda: self.pool.heartbeat_failures)
        m.gauge("htda_process_resident_bytes", "resident memory of the node process", callback=_rss_bytes)
        m.gauge("htda_http_connections_dropped", "connections dropped before a complete request: silent or slow "
                "past node.header_timeout, beyond node.max_pending, or a client certificate not allowed",
                callback=lambda: self.server.dropped)

    def roles(self) -> list[str]:
        """The roles this node offers now: its components, less any not serving (a standby coordinator)."""
        return [name for name, component in getattr(self, "components", {}).items() if component.serving()]

    def node_info(self) -> proto.NodeInfo:
        """This node's identity, roles, version and uptime (``GET /api/v1/node``)."""
        return proto.NodeInfo(name=self.name, url=self.url, roles=self.roles(), version=self.version,
                              started=self.started, uptime=round(self.clock.time() - self.started, 3))

    def _routes(self) -> list[Route]:
        return [
            Route.of(proto.HEALTH, self._healthz, "liveness probe: 503 naming each background loop that is "
                     "stale or failing", access="public", example=HEALTH_EXAMPLE),
            Route.of(proto.METRICS, self._metrics, "Prometheus metrics", access="public",
                     content_type="text/plain; version=0.0.4"),
            Route.of(proto.NODE, lambda r: self.node_info(), "this node's identity, roles, version, uptime",
                     access="public", example=NODE_EXAMPLE),
            Route.of(proto.POOL, lambda r: {"self": self.name, "members": self.pool.snapshot()},
                     "live pool members as this node sees them", example=POOL_EXAMPLE),
            Route.of(proto.HEARTBEAT, self._heartbeat, "a member's heartbeat; answers the member list",
                     max_body=1024 * 1024, example=HEARTBEAT_EXAMPLE),
            Route.of(proto.OPENAPI, lambda r: self.app.openapi("HTDA node", self.version),
                     "this OpenAPI document", access="public"),
        ]

    def health(self) -> proto.Health:
        """``/healthz``'s body: ok, or unhealthy with one line per loop that is not keeping up."""
        loops = [loop.health() for component in self.components.values() for loop in component.loops()]
        problems = [f"{h.name}: {h.state}" + (f" ({h.detail})" if h.detail else "") for h in loops if not h.ok]
        return proto.Health(status="unhealthy" if problems else "ok", name=self.name, problems=problems,
                            loops={h.name: proto.LoopHealth(**h.to_json()) for h in loops})

    def _healthz(self, request: Request) -> Response | proto.Health:
        body = self.health()
        if body.problems:
            return Response(json.dumps(to_wire(body)), status=503)
        return body

    def _metrics(self, request: Request) -> Response:
        return Response(self.metrics.render(), content_type="text/plain; version=0.0.4; charset=utf-8")

    def _heartbeat(self, request: Request) -> Response:
        beat: proto.Heartbeat = request.data
        if not beat.url.startswith(("http://", "https://")):
            raise HTTPError(400, "body.url: must be an http:// or https:// URL")
        return Response(self.pool.receive_json(to_wire(beat)))


# Answers of the example all-in-one node (config/all-in-one.toml) for the REST reference.
NODE_EXAMPLE = {"name": "all-in-one", "url": "http://127.0.0.1:8740",
                "roles": ["coordinator", "locator", "cache", "dashboard", "submit"], "version": "0.1.0",
                "started": 1795642839.234, "uptime": 5.156}
HEALTH_EXAMPLE = {"status": "ok", "name": "all-in-one", "problems": [], "loops": {
    loop: {"state": "ok", "detail": "", "last_ok_ago": 0.1}
    for loop in ("htda-coordinator-cycle", "htda-coordinator-leader", "htda-locator-sweep", "htda-cache-cycle",
                 "htda-cache-holdings", "htda-submit-send", "htda-submit-schedd")}}
POOL_EXAMPLE = {"self": "all-in-one", "members": [{
    **{k: NODE_EXAMPLE[k] for k in ("name", "url", "roles", "version", "started")}, "age": 0.4,
    "info": {"coordinator": {"cycle": 4, "placed_files": 2},
             "locator": {"files": 2, "nodes": 1, "looked_up": 2, "held": 1},
             "cache": {"capacity_bytes": 65458412857, "free_bytes": 65458368308, "used_bytes": 44549, "files": 2,
                       "staging": 0, "groups": ["a3090caf4d4013d0"], "groups_changed": 1795642841.72}}}]}

HEARTBEAT_EXAMPLE = {"members": POOL_EXAMPLE["members"], "interval": 10.0, "expiry": 30.0}

def _rss_bytes() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
