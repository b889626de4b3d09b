"""The ``ftactors`` command: one module per subcommand (``cli`` assembles them); ``bench``
loads the benchmarks from the source checkout's ``benchmarks/``, outside this package.
Tools may import every layer of the library; nothing in the library imports a tool."""
