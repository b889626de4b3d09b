"""User-shaped programs: ports of mpi4py programs written as a user writes them (``async
def main``, ``await``, ``register``, ``iterations()``), one module per program shape,
each with a plain-numpy reference of its failure-free answer, and the tests that run
them under the protocols with kills."""
