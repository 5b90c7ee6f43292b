from app._loop_probe.first import A
B = 2
