#!/usr/bin/env python3
"""Fits ExpApprox::MINIMAX_COEFFS (core/src/proto/softmax.rs): the degree-12 polynomial P(u)
of least maximum relative error to e^(4u - 7/2) = e^(x/2) on u = x/8 + 7/8 in [-7/8, 7/8]
(x in [-14, 0]), so that P(u)^2 ~ e^x.

Lawson's algorithm (iteratively reweighted least squares on the relative error) on 20001
Chebyshev points, in the Chebyshev basis of u/(7/8) for conditioning, then converted to
powers of u. Prints the coefficients and the errors of P and of P^2 on a dense grid of x.

Usage: python3 scripts/fit-neg-exp.py   (needs numpy)
"""
import numpy as np
from numpy.polynomial import chebyshev as C
from numpy.polynomial import polynomial as P

DEGREE = 12
UMAX = 0.875  # u = x/8 + 7/8 for x in [-14, 0]

u = np.cos(np.linspace(0.0, np.pi, 20001)) * UMAX
g = np.exp(4.0 * u - 3.5)
V = C.chebvander(u / UMAX, DEGREE)
w = np.ones_like(u)
for _ in range(400):
    c, *_ = np.linalg.lstsq(V * (w / g)[:, None], w, rcond=None)
    err = V @ c / g - 1.0
    w = w * np.abs(err)
    w /= w.sum()
mono = C.cheb2poly(c) / UMAX ** np.arange(DEGREE + 1)
print("max relative error of P:", np.abs(P.polyval(u, mono) / g - 1.0).max())
x = np.linspace(-14.0, 0.0, 1_400_001)
p = P.polyval(x / 8.0 + 0.875, mono)
print("max relative error of P^2 vs e^x:", np.abs(p * p / np.exp(x) - 1.0).max())
print("max |P^2 - e^x|:", np.abs(p * p - np.exp(x)).max())
for k in mono:
    print("    %r," % float(k))
