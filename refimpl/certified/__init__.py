"""The certified reference: every catalog objective, value and gradient, in ball arithmetic
(python-flint ``arb``), written from the papers' formulas independently of ``refimpl.exact``.

Each function takes the arguments of the catalog (binary64 inputs, converted without rounding)
and returns balls that contain the exact value at the working precision in effect
(``_ball.precision``); a branch the balls cannot decide raises ``_ball.Straddle``. The
certificate of the vectors (``conformance.vectors.certify``) raises the precision until every
printed digit is proven. The two references share only ``refimpl.validate``
(tests/test_layering.py enforces it).
"""
