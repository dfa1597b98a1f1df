#!/usr/bin/env python3
"""Fits the Chebyshev coefficients of proto::gelu_chebyshev (core/src/proto/gelu.rs):
E(x) = GeLU(x) - x/2 (an even function) on |x| <= XMAX as sum_{i<=8} c_i T_i(w),
w = 2x^2/T^2 - 1 in [-1, 1), T^2 = 2^(S+1)/K with (S, K) = (7, 13), i.e. T = 4.437
(the protocol computes w = K x^2 / 2^S - 1 exactly, so the fit uses that T). The fit
covers |x| <= XMAX = 4.375 only: the protocol's comparisons see x cut to 3 fractional
bits, so the polynomial piece may be taken up to x < 4 + 3/8 (and down to -4.25), never
beyond.

Lawson's algorithm (iteratively reweighted least squares on the absolute error) on
Chebyshev points of w, pure Python (no numpy). Prints the coefficients for the erf and
the tanh form and the plaintext max error of the piecewise function the protocol
computes (its cut at +-4: 0 below -4, x above) and of the fit alone on [-XMAX, XMAX].

Usage: python3 scripts/fit-gelu-cheb.py
"""
import math

S, K = 7, 13
T2 = 2.0 ** (S + 1) / K
DEG = 8
XMAX = 4.375
NODES = 800
ITERS = 150


def gelu_erf(x):
    return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def cheb(w, d):
    t = [1.0, w]
    for _ in range(2, d + 1):
        t.append(2.0 * w * t[-1] - t[-2])
    return t[: d + 1]


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


def fit(gelu):
    wmax = 2.0 * XMAX * XMAX / T2 - 1.0
    ws = [(wmax - 1.0) / 2.0 + (wmax + 1.0) / 2.0 * math.cos(math.pi * (i + 0.5) / NODES)
          for i in range(NODES)]
    xs = [math.sqrt((w + 1.0) * T2 / 2.0) for w in ws]
    ys = [gelu(x) - x / 2.0 for x in xs]
    v = [cheb(w, DEG) for w in ws]
    wt = [1.0] * NODES
    c = None
    for _ in range(ITERS):
        a = [[sum(wt[i] * v[i][j] * v[i][k] for i in range(NODES)) for k in range(DEG + 1)]
             for j in range(DEG + 1)]
        r = [sum(wt[i] * v[i][j] * ys[i] for i in range(NODES)) for j in range(DEG + 1)]
        c = solve(a, r)
        e = [abs(sum(c[j] * v[i][j] for j in range(DEG + 1)) - ys[i]) for i in range(NODES)]
        s = sum(wt[i] * e[i] for i in range(NODES))
        wt = [wt[i] * e[i] / s for i in range(NODES)]
    return c


def poly(c, x):
    w = 2.0 * x * x / T2 - 1.0
    return x / 2.0 + sum(ci * ti for ci, ti in zip(c, cheb(w, DEG)))


for name, gelu in (("Erf", gelu_erf), ("Tanh", gelu_tanh)):
    c = fit(gelu)
    grid = [-XMAX + 2.0 * XMAX * i / 200000 for i in range(200001)]
    fit_err = max(abs(poly(c, x) - gelu(x)) for x in grid)
    cut = max(abs(gelu(-4.0)), abs(gelu(4.0) - 4.0))
    print("%s: T = %.4f, max |fit err| on [-%g, %g] %.3e, cut at +-4 %.3e"
          % (name, math.sqrt(T2), XMAX, XMAX, fit_err, cut))
    for ci in c:
        print("    %r," % ci)
