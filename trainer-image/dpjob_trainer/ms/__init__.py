"""The MindSpore backend of the trainer (``--framework mindspore``).

Only the modules of this package import mindspore, and only the ones that train (tasks.py,
train.py, ckpt.py); config.py, env.py, sharding.py and cli.py are pure, so a bad flag or
launch environment fails in milliseconds, before the multi-second mindspore import, and the
torch image never needs mindspore. This __init__ imports nothing for the same reason.
"""
