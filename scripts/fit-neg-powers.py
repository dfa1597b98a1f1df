#!/usr/bin/env python3
"""Fits the sub-segment polynomials of core/src/proto/neg_power.rs: for u^(-1) and u^(-1/2)
on each of the S sub-segments [2^(i/S), 2^((i+1)/S)] of the octave [1, 2) (S = 3 for the
reciprocal, 2 for the reciprocal square root), the degree-4 polynomial in t = u - 3/2 of
least maximum relative error. Each sub-segment is widened by 2^-8 on both sides: the
protocol's integer thresholds and its truncated u may stray that far for X >= 2^8.

Lawson's algorithm (iteratively reweighted least squares on the relative error) on 4001
Chebyshev points of each sub-segment, in the Chebyshev basis of the sub-segment for
conditioning, then converted to powers of t. Prints the coefficients as Rust arrays and
the worst relative error over a dense grid.

Usage: python3 scripts/fit-neg-powers.py   (needs numpy)
"""
import numpy as np
from numpy.polynomial import chebyshev as C
from numpy.polynomial import polynomial as P

DEGREE = 4
WIDEN = 2.0 ** -8
CENTRE = 1.5


def fit(a, lo, hi):
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    u = mid + half * np.cos(np.linspace(0.0, np.pi, 4001))
    g = u ** -a
    V = C.chebvander((u - mid) / half, DEGREE)
    w = np.ones_like(u)
    for _ in range(300):
        c, *_ = np.linalg.lstsq(V * (w / g)[:, None], w, rcond=None)
        err = V @ c / g - 1.0
        w = w * np.abs(err)
        w /= w.sum()
    # Chebyshev basis of s = (u - mid)/half -> powers of s -> powers of t = u - CENTRE,
    # with s = (t + CENTRE - mid)/half.
    in_s = C.cheb2poly(c)
    in_t = np.zeros(DEGREE + 1)
    lin = np.array([(CENTRE - mid) / half, 1.0 / half])
    power = np.array([1.0])
    for k in range(DEGREE + 1):
        in_t[: len(power)] += in_s[k] * power
        power = P.polymul(power, lin)
    dense = np.linspace(lo, hi, 200001)
    worst = np.abs(P.polyval(dense - CENTRE, in_t) * dense ** a - 1.0).max()
    return in_t, worst


for name, a, s in [("RECIP", 1.0, 3), ("RSQRT", 0.5, 2)]:
    rows, worst = [], 0.0
    for i in range(s):
        lo = 2.0 ** (i / s) - WIDEN
        hi = 2.0 ** ((i + 1) / s) + WIDEN
        coeffs, err = fit(a, lo, hi)
        rows.append(coeffs)
        worst = max(worst, err)
    print("// %s: worst relative error %.3e" % (name, worst))
    print("const %s_COEFFS: [[f64; %d]; %d] = [" % (name, DEGREE + 1, s))
    for r in rows:
        print("    [" + ", ".join("%r" % float(v) for v in r) + "],")
    print("];")
