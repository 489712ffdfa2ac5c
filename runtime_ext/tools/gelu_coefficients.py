"""Prints the coefficient table of runtime_ext/src/host/gelu.cc.

q(x) = 0.5 * erf(|x| / sqrt(2)) is split at |x| = i * W (i = 0..15, W = 0.35, so the table
ends at 5.6, past which q is 0.5 in float32). On each piece it is fitted by a degree-5
polynomial in u = |x| / W - i in [0, 1): a least-squares fit in float64 at 300 Chebyshev
nodes, converted to powers of u and rounded to float32. Row d of the table holds the
coefficient of u^d for the 16 pieces, so that a vector permute picks each lane's piece.

Run: python runtime_ext/tools/gelu_coefficients.py  (numpy only)
"""

import math

import numpy as np

PIECES, DEGREE, WIDTH, NODES = 16, 5, 0.35, 300


def table() -> np.ndarray:
    erf = np.vectorize(math.erf)
    k = np.arange(NODES)
    u = (np.cos(np.pi * (k + 0.5) / NODES) + 1) / 2
    rows = []
    for i in range(PIECES):
        x = (i + u) * WIDTH
        q = 0.5 * erf(x / math.sqrt(2))
        fit = np.polynomial.Polynomial.fit(u, q, DEGREE, domain=[0, 1], window=[0, 1])
        rows.append(fit.coef)
    return np.array(rows).T.astype(np.float32)


def worst_error(coef: np.ndarray) -> float:
    """Largest |q - 0.5 erf| over a fine grid, the polynomial evaluated in float32."""
    erf = np.vectorize(math.erf)
    worst = 0.0
    u = np.linspace(0, 1, 4001, dtype=np.float32)
    for i in range(PIECES):
        q = np.full(u.shape, coef[DEGREE, i], np.float32)
        for d in range(DEGREE - 1, -1, -1):
            q = (q * u + coef[d, i]).astype(np.float32)
        want = 0.5 * erf((i + u.astype(np.float64)) * WIDTH / math.sqrt(2))
        worst = max(worst, float(np.max(np.abs(q - want))))
    return worst


if __name__ == "__main__":
    c = table()
    for row in c:
        print("    {" + ", ".join(f"{v:.9e}f" for v in row) + "},")
    print(f"// worst |q - 0.5 erf(x / sqrt 2)| in float32: {worst_error(c):.3g}")
