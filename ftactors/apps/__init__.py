"""Example programs (``ftactors run APP``): NPB CG, HPL, a 2-D stencil and a coupled
pair of stencils. Written as users write theirs: they import ``ftactors`` only."""
