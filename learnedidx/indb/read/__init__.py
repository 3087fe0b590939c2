"""Reading the caller's training data as its backend streams it to the server.

The backend reads the data in the caller's statement, as the caller (``extension/pages.c``, ``rows.c``);
here the server decodes what arrives: :mod:`.strider` decodes heap pages in Numba, :mod:`.passes`
turns the slots of each pass over the data into rows, decoded in parallel and handed to the
engine while they arrive, kept in memory (:mod:`.memory`) when they fit and more passes follow.
"""
