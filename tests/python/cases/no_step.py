def setup():
    pass
