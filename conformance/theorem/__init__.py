"""The stationary-policy theorem of Proximal KL: the exact table on token trees (``table``) and
the same question asked of any implementation (``probe``)."""
