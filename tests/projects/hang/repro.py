"""Fixture: spawns a sleeping grandchild, records its pid, then sleeps forever."""

import subprocess
import sys
import time

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open("grandchild.pid", "w") as f:
    f.write(str(child.pid))
print("step=1 loss=0.5", flush=True)
time.sleep(600)
