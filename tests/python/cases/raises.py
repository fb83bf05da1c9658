def step(i):
    if i == 2:
        raise KeyError("missing batch")
