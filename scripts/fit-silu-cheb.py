#!/usr/bin/env python3
"""Fits the coefficients of proto::silu_chebyshev (core/src/proto/gelu.rs).

SiLU(x) = ReLU(x) - g(|x|) with g(t) = t*sigma(-t) = t/(1 + e^t), smooth on t >= 0 and
below 1.3e-4 beyond t = 11.44. The protocol computes t = |x| from a sign test on x cut to
4 fractional bits, so t may also be -x for x in [0, 3/16) (the test may read such x as
negative; g(-x) = -SiLU(x) keeps the result right as long as the polynomial fits there
too). The polynomial piece is taken for t < 185/16 at most (a range test on t cut to 4
fractional bits against 183/16), so G must fit g on [-3/16, 185/16], which is what the
fit covers; there z = 11 t / 64 - 1 stays within [-1.033, 0.988].

G is a degree-12 polynomial in z, written in the shares that the protocol forms:
z, T2 = 2z^2 - 1, a3 = z*T2, T4 = 2*T2^2 - 1 and Q = T4^2, as

    G = k0 + k1 z + k2 T2 + k3 a3 + k4 T4 + k5 Q
        + T4 (m1 z + m2 T2 + m3 a3) + Q (n1 z + n2 T2 + n3 a3 + n4 T4),

which spans every polynomial of degree <= 12 (13 coefficients, 13 dimensions).

Lawson's algorithm (iteratively reweighted least squares on the absolute error) on
Chebyshev points of [-3/16, 185/16], with numpy. Prints the 13 coefficients in the order
above, the max error of the fit on a dense grid and the error of the cut at 183/16.

Usage: python3 scripts/fit-silu-cheb.py
"""
import numpy as np

ALPHA = 11.0 / 64.0
LO = -3.0 / 16.0
HI = 185.0 / 16.0
CUT = 183.0 / 16.0
NODES = 4000
ITERS = 200


def g(t):
    return t / (1.0 + np.exp(t))


def basis(t):
    z = ALPHA * t - 1.0
    t2 = 2.0 * z * z - 1.0
    a3 = z * t2
    t4 = 2.0 * t2 * t2 - 1.0
    q = t4 * t4
    one = np.ones_like(z)
    return np.array([one, z, t2, a3, t4, q,
                     t4 * z, t4 * t2, t4 * a3,
                     q * z, q * t2, q * a3, q * t4]).T


def fit():
    u = np.cos(np.pi * (np.arange(NODES) + 0.5) / NODES)
    t = LO + (u + 1.0) / 2.0 * (HI - LO)
    v, y = basis(t), g(t)
    w = np.ones(NODES)
    c = None
    for _ in range(ITERS):
        sw = np.sqrt(w)
        c = np.linalg.lstsq(v * sw[:, None], y * sw, rcond=None)[0]
        e = np.abs(v @ c - y)
        w = w * e
        w /= w.sum()
    return c


c = fit()
grid = np.linspace(LO, HI, 400001)
err = np.max(np.abs(basis(grid) @ c - g(grid)))
print("max |fit err| on [%g, %g] %.3e, cut at %g: g = %.3e" % (LO, HI, err, CUT, g(CUT)))
for ci in c:
    print("    %r," % float(ci))
