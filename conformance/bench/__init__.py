"""Timing and memory of the distillation kernels side by side, and timings of the exact side
(``lossproof bench``, DESIGN §3: maintainer side).

``run`` drives one benchmark run and writes its JSON; ``methods`` holds what is compared (the
inputs and every method's forward + backward); ``timing`` the wall times and the same-run copy
bandwidth; ``memory`` the peak additional memory of one call; ``exact`` the timings of vector
generation and of a check over growing fractions of the vector set.
"""
