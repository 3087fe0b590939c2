"""The learned index: SIndex groups, SIA incremental training, the Store API, durability."""
