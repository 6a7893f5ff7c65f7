"""sysload: CPU used by our own process tree is not counted as foreign load."""

import subprocess
import sys

import pytest

from llamalab.machine import sysload

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_our_child_cpu_is_counted_as_ours():
    a = sysload.snapshot()
    # a child that burns ~0.5 s of CPU, then stays alive (so its ticks are read from /proc/<pid>/stat)
    p = subprocess.Popen([sys.executable, "-c",
                          "import time\nt=time.process_time()\nwhile time.process_time()-t<0.5: pass\n"
                          "print('done', flush=True)\ntime.sleep(5)"], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "done"
    b = sysload.snapshot()
    p.kill()
    p.wait()
    ours = (b.ours_ticks - a.ours_ticks) / sysload._TICK
    assert 0.45 <= ours <= 2.0, ours


@pytest.mark.parametrize("busy, ours, seconds, want", [
    pytest.param(200, 100, 1.0, 1.0, id="one-foreign-core"),
    pytest.param(100, 100, 1.0, 0.0, id="all-ours"),
    pytest.param(100, 150, 1.0, 0.0, id="never-negative"),
])
def test_foreign_cores(busy, ours, seconds, want):
    t = sysload._TICK / 100
    a = sysload.Snapshot(when=10.0, busy_ticks=0, ours_ticks=0)
    b = sysload.Snapshot(when=10.0 + seconds, busy_ticks=int(busy * t), ours_ticks=int(ours * t))
    assert sysload.foreign_cores(a, b) == pytest.approx(want, abs=0.01)
    assert sysload.foreign_cores(None, b) is None and sysload.foreign_cores(b, a) is None
