"""The k3s plugin's YAML: exactly what PyYAML gives, with PyYAML imported only when needed."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from noderole_k3s import _yaml

ALPHABET = "abcyYnNtTfFoOlLuUeExX019_./=+,@%$()-: #'\"~!&*?|>[]{}\\"


def _pyyaml_dump(documents: list[Any]) -> str:
    return yaml.safe_dump_all(
        documents, sort_keys=False, default_flow_style=False, explicit_start=False
    )


words = st.text(alphabet=ALPHABET, min_size=0, max_size=12)
"""Strings near the plain ones: indicators, quotes, YAML 1.1 booleans and nulls, ``:``, ``#``."""
long_words = st.lists(st.sampled_from(["word", "a-b", "x/y", "k=v", "z"]), max_size=30).map(
    " ".join
)
numbers = st.lists(
    st.sampled_from(["0", "1", "12", "01", "_", ".", ":", "e", "-", "+", "e+1"]), max_size=8
).map("".join)
"""Digits, dots and colons: addresses and versions next to ints, floats and sexagesimals."""
"""Space-separated words around PyYAML's 80-column fold."""
scalars = st.one_of(
    words,
    numbers,
    long_words,
    st.integers(min_value=-(2**40), max_value=2**40),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, width=32),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(words, inner, max_size=4)),
    max_leaves=12,
)
documents = st.lists(
    st.one_of(st.dictionaries(words, values, max_size=5), st.lists(values, max_size=4)),
    max_size=3,
)


class TestDump:
    @settings(max_examples=300, deadline=None)
    @given(documents)
    def test_same_text_as_pyyaml(self, docs: list[Any]) -> None:
        """dump_all writes, byte for byte, what yaml.safe_dump_all writes."""
        assert _yaml.dump_all(docs) == _pyyaml_dump(docs)

    def test_shapes_k3s_writes_need_no_pyyaml(self) -> None:
        """A drop-in of flags, lists and nested manifests is written without PyYAML."""
        docs = [
            {"write-kubeconfig-mode": "0600", "tls-san": ["node.example", "10.0.0.1"]},
            {
                "apiVersion": "apiserver.k8s.io/v1beta1",
                "kind": "EgressSelectorConfiguration",
                "egressSelections": [
                    {"name": "cluster", "connection": {"proxyProtocol": "GRPC"}, "count": 1}
                ],
                "args": ["--logtostderr=true", "--agent-identifiers=ipv4=$(HOST_IP)"],
                "image": "registry.k8s.io/kas-network-proxy/proxy-agent:v0.30.3",
                "host": "127.0.0.1",
                "empty": {},
                "enabled": True,
            },
        ]
        fast = "".join(_yaml._document(d, first=i == 0) for i, d in enumerate(docs))
        assert fast == _yaml.dump_all(docs) == _pyyaml_dump(docs)


flat_lines = st.lists(
    st.one_of(
        st.tuples(st.just("key"), words, words),
        st.tuples(st.just("list"), words, st.lists(words, max_size=3)),
        st.tuples(st.just("comment"), words, words),
    ),
    max_size=6,
)


def _flat_text(lines: list[tuple[str, str, Any]], indent: int) -> str:
    out = []
    for kind, key, value in lines:
        if kind == "key":
            out.append(f"{key}: {value}")
        elif kind == "list":
            out.append(f"{key}:")
            out += [f"{' ' * indent}- {item}" for item in value]
        else:
            out.append(f"# {key} {value}")
    return "\n".join(out) + "\n"


class TestLoad:
    @settings(max_examples=300, deadline=None)
    @given(flat_lines, st.sampled_from([0, 2]))
    def test_same_values_as_pyyaml(self, lines: list[tuple[str, str, Any]], indent: int) -> None:
        """load reads what yaml.safe_load reads, and refuses what it refuses."""
        text = _flat_text(lines, indent)
        try:
            expected = yaml.safe_load(text)
        except yaml.YAMLError:
            with pytest.raises(_yaml.YAMLError):
                _yaml.load(text)
            return
        assert _yaml.load(text) == expected

    @pytest.mark.parametrize(
        "text",
        [
            "write-kubeconfig-mode: '0600'\n",
            "# comment\nnode-label:\n- operator\n- 'tier=edge'\ndisable: traefik\n",
            "cluster-init: true\nhttps-listen-port: 6443\nserver: https://10.0.0.1:6443\n",
            'token: "abc"\nnode-name:\n',
            "",
        ],
    )
    def test_flat_config_is_read_without_pyyaml(self, text: str) -> None:
        """A flat config.yaml is read by the fast path, as PyYAML reads it."""
        assert _yaml._flat(text) == yaml.safe_load(text)

    def test_syntax_error_names_the_line(self) -> None:
        """Text PyYAML refuses is a YAMLError carrying the line."""
        with pytest.raises(_yaml.YAMLError) as caught:
            _yaml.load("a: 1\nb: [unclosed\n")
        assert caught.value.line == 3


PROBE = """
import json, sys
from noderole_k3s import _yaml
_yaml.dump_all([{"tls-san": ["a.example"], "mode": 1}])
_yaml.load("write-kubeconfig-mode: '0600'\\nnode-label:\\n- x\\n")
print(json.dumps(sorted(sys.modules)))
"""


def test_plain_shapes_import_no_pyyaml() -> None:
    """Writing and reading the plain shapes imports no PyYAML."""
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    assert "yaml" not in json.loads(done.stdout)


COMPILE_PROBE = """
import json, re
import noderole_k3s  # the package first: only the import of _yaml itself is counted

def compiled():
    # re.compile caches every pattern it compiles (3.12 adds a second cache); a private detail,
    # so the probe first proves a compilation shows up there
    return sorted(repr(key) for name in ("_cache", "_cache2") for key in getattr(re, name, {}))

re.purge()
re.compile("probe[0-9]+")
seen = compiled()
re.purge()
import noderole_k3s._yaml
print(json.dumps({"probe": seen, "compiled": compiled()}))
"""


def test_importing_the_yaml_module_compiles_no_regular_expression() -> None:
    """Importing noderole_k3s._yaml in a fresh interpreter compiles no regular expression."""
    done = subprocess.run(
        [sys.executable, "-c", COMPILE_PROBE], capture_output=True, text=True, check=True
    )
    found = json.loads(done.stdout)
    assert any("probe[0-9]+" in key for key in found["probe"])  # the cache does record them
    assert found["compiled"] == []
