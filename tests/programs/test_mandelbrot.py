"""mpi4py's mandelbrot demo, ported: the sequential image on an odd and an even rank
count (rows dealt unevenly), with no protocol. (Its loops of different lengths under
the protocols are issue 40's item 1.)"""
import numpy as np
import pytest

import ftactors as ft
from tests.programs.mandelbrot import Mandelbrot, reference


@pytest.mark.parametrize("transport", ["local", "sim"])
@pytest.mark.parametrize("ranks", [3, 8])
def test_the_image_of_the_sequential_demo(transport, ranks):
    image = ft.run(Mandelbrot, ranks, transport=transport).results[0]
    assert np.array_equal(image, reference())
