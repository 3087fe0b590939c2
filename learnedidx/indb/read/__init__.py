"""Reading a caller's training data from PostgreSQL, in the caller's snapshot and role.

:mod:`.access` opens the snapshot session and checks what the caller may read;
:mod:`.training_data` picks the read path: the Strider (:mod:`.strider`, heap pages decoded
in Numba) or binary COPY (:mod:`.copybinary`).
"""
