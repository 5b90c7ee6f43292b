from app._loop_probe.second import B
A = 1
