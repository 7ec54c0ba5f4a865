"""Running untrusted, model-written code: bubblewrap sandboxes, their inner program, and their memory bounds.

Why its own package, low in the layers: graders of code (`lemon.benchmarks.humaneval`) use it, and it needs
nothing of LEMON but `lemon.errors`, so it knows no benchmark, item or harness. `runner` starts and judges
checks, `child` is the program that runs inside, `memory` adds the cgroup and seccomp bounds.
"""
