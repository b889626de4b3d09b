"""What runs a program: the protocol hooks (``_protocol``) and ``Rank``, the rank host
(``_host``), the coordinator, checkpoint sets, chaos plans and traces. Imports the facade,
the engine and ``ftactors.base``; never a transport, a protocol or a tool."""
