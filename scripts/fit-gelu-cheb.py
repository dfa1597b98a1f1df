#!/usr/bin/env python3
"""Fits the coefficients of proto::gelu_chebyshev (core/src/proto/gelu.rs).

E(x) = GeLU(x) - x/2 is even; the protocol evaluates it in w = 2x^2/T^2 - 1 with
T^2 = 2^(S+1)/K, (S, K) = (7, 13), T = 4.437 (it computes w = K x^2 / 2^S - 1 exactly, so
the fit uses that T), from the shares w, T2 = 2w^2 - 1 (the Chebyshev polynomial) and
Q = T2 (T2 + a w) with a = A8/8, as

    E ~ k0 + k1 w + k2 T2 + k3 Q + k4 w T2 + k5 w Q + k6 T2 Q + k7 Q^2,

a degree-8 polynomial in w whose w^7 coefficient is tied to its w^8 coefficient by a
(Q^2 ~ 16 (w^8 + a w^7 + ...)); a is the ratio of those coefficients in the unrestricted
degree-8 fit, rounded to eighths and tuned by a scan (Erf -7/8, Tanh -6/8), so the
restriction costs almost nothing while the protocol needs one product fewer (T2 and Q,
not T3 and T4).

The fit covers |x| <= XMAX = 4.1875 only: the protocol's comparisons see x cut to 4
fractional bits, so the polynomial piece may be taken up to x < 4 + 3/16 (and down to
-4.125), never beyond.

Lawson's algorithm (iteratively reweighted least squares on the absolute error) on
Chebyshev points of w, pure Python (no numpy). Prints, per GeLU form, A8, the
coefficients k0..k7, the max error of the fit on [-XMAX, XMAX] (dense grid) and the error
of the protocol's cut at +-4.

Usage: python3 scripts/fit-gelu-cheb.py
"""
import math

S, K = 7, 13
T2 = 2.0 ** (S + 1) / K
XMAX = 4.1875
NODES = 800
ITERS = 150


def gelu_erf(x):
    return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def basis(w, a):
    t2 = 2.0 * w * w - 1.0
    q = t2 * (t2 + a * w)
    return [1.0, w, t2, q, w * t2, w * q, t2 * q, q * q]


def solve(a, b):
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        m[c], m[p] = m[p], m[c]
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                for k in range(c, n + 1):
                    m[r][k] -= f * m[c][k]
    return [m[i][n] / m[i][i] for i in range(n)]


def fit(gelu, a):
    wmax = 2.0 * XMAX * XMAX / T2 - 1.0
    ws = [(wmax - 1.0) / 2.0 + (wmax + 1.0) / 2.0 * math.cos(math.pi * (i + 0.5) / NODES)
          for i in range(NODES)]
    xs = [math.sqrt((w + 1.0) * T2 / 2.0) for w in ws]
    ys = [gelu(x) - x / 2.0 for x in xs]
    v = [basis(w, a) for w in ws]
    m = len(v[0])
    wt = [1.0] * NODES
    c = None
    for _ in range(ITERS):
        mat = [[sum(wt[i] * v[i][j] * v[i][k] for i in range(NODES)) for k in range(m)]
               for j in range(m)]
        r = [sum(wt[i] * v[i][j] * ys[i] for i in range(NODES)) for j in range(m)]
        c = solve(mat, r)
        e = [abs(sum(c[j] * v[i][j] for j in range(m)) - ys[i]) for i in range(NODES)]
        s = sum(wt[i] * e[i] for i in range(NODES))
        wt = [wt[i] * e[i] / s for i in range(NODES)]
    return c


def poly(c, a, x):
    w = 2.0 * x * x / T2 - 1.0
    return x / 2.0 + sum(ci * bi for ci, bi in zip(c, basis(w, a)))


for name, gelu, a8 in (("Erf", gelu_erf, -7), ("Tanh", gelu_tanh, -6)):
    a = a8 / 8.0
    c = fit(gelu, a)
    grid = [-XMAX + 2.0 * XMAX * i / 200000 for i in range(200001)]
    fit_err = max(abs(poly(c, a, x) - gelu(x)) for x in grid)
    cut = max(abs(gelu(-4.0)), abs(gelu(4.0) - 4.0))
    print("%s: A8 = %d, max |fit err| on [-%g, %g] %.3e, cut at +-4 %.3e"
          % (name, a8, XMAX, XMAX, fit_err, cut))
    for ci in c:
        print("    %r," % ci)
