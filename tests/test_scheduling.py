"""How `make test` shares the tests between its workers (tests/conftest.py): under `--dist loadgroup` each module's
tests go to one worker, so a module-scoped fixture (a study run once, the sshd in tests/rig/test_rpc_netns.py) is
made once. Two workers each making the module's sshd fixture had one remove the other's privilege separation folder.
"""

from __future__ import annotations


def test_a_module_s_tests_share_one_worker_under_loadgroup(request):
    worker = getattr(request.config, "workerinput", None)
    if worker is None or not request.config.getvalue("loadgroup"):  # not an xdist worker of `--dist loadgroup`
        assert "@" not in request.node.nodeid
        return
    # pytest-xdist names the group in the node id (nodeid@group), and sends one group to one worker
    assert request.node.nodeid.endswith("@tests/test_scheduling.py"), request.node.nodeid

