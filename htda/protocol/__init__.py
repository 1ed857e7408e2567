"""The contract between HTDA's roles: every path, request and answer, defined once.

- :mod:`.paths`: the paths as strings (imports nothing: the hooks use it);
- :mod:`.base`: :class:`~.base.Body` (requests: unknown fields refused) and :class:`~.base.Answer` structs
  (``msgspec``), :class:`~.base.Endpoint` (method, path, body and answer types), decoding to 400 messages;
- :mod:`.node`, :mod:`.coordinator`, :mod:`.locator`, :mod:`.cache`: each role's endpoints and types;
- :mod:`.clients`: a typed client per role over the node's signed client.

Servers declare their routes with these endpoints (the REST layer decodes bodies with them and the OpenAPI
document carries their schemas), callers use the clients, and the tests' fakes check what they receive with the
same types.  This package's ``__init__`` imports nothing, so ``htda.protocol.paths`` stays cheap.
"""
