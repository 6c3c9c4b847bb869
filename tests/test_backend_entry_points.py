"""Backends from the `torchsmith.backends` entry point group, as an installed plug-in meets them: in a
fresh process whose first torchsmith call names the backend.

Installing is not needed for that: a folder on sys.path holding a module and a `*.dist-info` folder
whose `entry_points.txt` declares the group is what `importlib.metadata` reads after `pip install`.
One subprocess checks both plug-ins so the suite pays for one interpreter start.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

DISTRIBUTION = "ts-entry-point-probe"

PLUGIN = '''
from torchsmith.ir import compile_to_python

CALLS = []


def probe_backend(graph, example_inputs):
    CALLS.append(graph.name)
    return compile_to_python(graph)
'''

ENTRY_POINTS = """
[torchsmith.backends]
probe = ts_probe_plugin:probe_backend
probe_broken = ts_probe_missing_module:backend
probe_not_callable = ts_probe_plugin:CALLS
"""

# Runs in the child process: the first torchsmith call of the process compiles with the plug-in by
# name, the second looks up the plug-in whose module does not exist.
CHILD = '''
import json, torch, torchsmith
from torchsmith.errors import BackendError

def f(x):
    return torch.sin(x) * 2 + 1

x = torch.randn(5)
compiled = torchsmith.compile(f, backend="probe", options={"fallback": "raise"})
out = compiled(x)
import ts_probe_plugin
result = {"matches": bool(torch.allclose(out, f(x))), "graphs": ts_probe_plugin.CALLS}
try:
    torchsmith.compile(f, backend="probe_broken")
except BackendError as error:
    result["broken"] = str(error)
try:
    torchsmith.lookup_backend("probe_not_callable")
except BackendError as error:
    result["not_callable"] = str(error)
result["known"] = torchsmith.list_backends()
print(json.dumps(result))
'''


@pytest.fixture(scope="module")
def child_result(tmp_path_factory):
    site = tmp_path_factory.mktemp("plugin_site")
    (site / "ts_probe_plugin.py").write_text(PLUGIN)
    dist_info = site / f"{DISTRIBUTION.replace('-', '_')}-0.3.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: 0.3\n")
    (dist_info / "entry_points.txt").write_text(textwrap.dedent(ENTRY_POINTS))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_plugin_backend_resolves_by_name_on_the_first_call(child_result):
    assert child_result["matches"]
    assert child_result["graphs"] == ["f"]  # the plug-in compiled the graph, no fallback ran
    assert {"probe", "probe_broken", "eager", "inductor"} <= set(child_result["known"])


def test_plugin_that_fails_to_load_names_its_distribution_and_the_error(child_result):
    message = child_result["broken"]
    assert "'probe_broken'" in message
    assert f"{DISTRIBUTION} 0.3" in message
    assert "ModuleNotFoundError" in message and "ts_probe_missing_module" in message


def test_plugin_entry_point_that_is_not_callable_is_refused_by_name(child_result):
    message = child_result["not_callable"]
    assert "'probe_not_callable'" in message and DISTRIBUTION in message and "not a callable" in message
