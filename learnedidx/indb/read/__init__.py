"""Reading the caller's training data as its backend streams it to the server.

The backend reads the data in the caller's statement, as the caller (``extension/learnedidx.c``);
here the server decodes what arrives: :mod:`.strider` decodes heap pages in Numba,
:mod:`.training_data` holds the rows as the engine takes them, and :mod:`.passes` turns the
frames of one pass over the data into :class:`~.training_data.TrainingData`.
"""
