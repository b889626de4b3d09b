"""The ``ftactors`` command: one module per subcommand (``cli`` assembles them), and
``bench/``. Tools may import every layer of the library; nothing in the library imports
a tool."""
