"""Run in a node (the run's own image, with torch): compare files two runs wrote, tensors with
``torch.load`` walked together (dicts, lists, tensors, numbers), exactly or within a relative
tolerance; one JSON object per path on stdout. A file torch cannot load is ``"loadable":
false`` (the launcher compares it byte for byte).

``python3 compare_tensors.py RTOL FIRST_DIR SECOND_DIR PATH...``. The launcher sends this file's
text to ``python3 -c`` (:mod:`orchestrate.chaos.compare`), so a node needs nothing of
ddp-compose installed; torch is imported only when it runs.
"""
import json
import sys


def walk(torch, a, b, where, rtol, worst):
    """Whether ``a`` and ``b`` match; each leaf's difference goes to ``worst``."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            worst.append((float("inf"), where + f" (shape {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype})"))
            return False
        if not a.is_floating_point():
            a, b = a.double(), b.double()
        apart = (a.double() - b.double()).abs()
        diff = apart.max().item() if a.numel() else 0.0
        # the least relative tolerance that accepts every value (|a - b| <= rtol * |b|): inf where b is 0 and a is not
        relative = torch.where(apart == 0, torch.zeros_like(apart), apart / b.double().abs())
        worst.append((diff, where, relative.max().item() if a.numel() else 0.0))
        return torch.equal(a, b) if rtol == 0 else bool(torch.allclose(a.double(), b.double(), rtol=rtol, atol=0.0))
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            worst.append((float("inf"), where + f" (keys differ: {sorted(map(str, a.keys() ^ b.keys()))[:5]})"))
            return False
        return all([walk(torch, a[k], b[k], f"{where}.{k}" if where else str(k), rtol, worst) for k in a])
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            worst.append((float("inf"), where + f" (lengths {len(a)} vs {len(b)})"))
            return False
        return all([walk(torch, x, y, f"{where}[{i}]", rtol, worst) for i, (x, y) in enumerate(zip(a, b))])
    if is_numpy_scalar(a) or is_numpy_scalar(b):  # np.float32(0.5) is no float: as Python's number, so --rtol holds
        plain_a, plain_b = as_python(a), as_python(b)
        if plain_a is not a or plain_b is not b:  # (np.longdouble's item() is one of numpy's again: left as it is)
            return walk(torch, plain_a, plain_b, where, rtol, worst)
    if isinstance(a, float) and isinstance(b, float):
        worst.append((abs(a - b), where, 0.0 if a == b else abs(a - b) / abs(b) if b else float("inf")))
        return a == b if rtol == 0 else abs(a - b) <= rtol * abs(b)
    if callable(getattr(a, "state_dict", None)) and type(a) is type(b) and not isinstance(a, dict):
        # saved whole (a model, an optimizer, a scheduler, a scaler): by its state, as identity says nothing
        return walk(torch, a.state_dict(), b.state_dict(), where, rtol, worst)
    if is_array(a) and is_array(b):  # numpy's, as tensors where they can be (their == is elementwise)
        try:
            return walk(torch, torch.as_tensor(a.copy()), torch.as_tensor(b.copy()), where, rtol, worst)
        except (TypeError, RuntimeError, ValueError):  # strings, objects: value for value
            a, b = (a.shape, a.dtype.str, a.tolist()), (b.shape, b.dtype.str, b.tolist())
    try:
        same = bool(a == b)
    except Exception:  # an == that is elementwise, or refuses: by the objects' own state where they have one
        state_a, state_b = getattr(a, "__dict__", None), getattr(b, "__dict__", None)
        depth = where.count(".")  # (an object that holds itself would be walked for ever)
        if type(a) is type(b) and isinstance(state_a, dict) and isinstance(state_b, dict) and depth < 50:
            return walk(torch, state_a, state_b, where, rtol, worst)
        same = False
    if not same:
        worst.append((float("inf"), where + f" ({short(a)} vs {short(b)})"))
    return same


def is_array(value):
    """Whether ``value`` is a numpy array (numpy is not imported here: the node's torch may lack it)."""
    return type(value).__module__ == "numpy" and type(value).__name__ == "ndarray"


def is_numpy_scalar(value):
    """Whether ``value`` is one of numpy's scalars (``np.float32(0.5)``, ``np.int64(3)``)."""
    return type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0 and not is_array(value) \
        and callable(getattr(value, "item", None))


def as_python(value):
    """A numpy scalar as Python's own number (its ``item()``), where it has one; else ``value``."""
    if not is_numpy_scalar(value):
        return value
    item = value.item()
    return value if is_numpy_scalar(item) else item


def short(value):
    """A value in one short line, for where two differ."""
    text = " ".join(repr(value).split())
    return text if len(text) <= 80 else text[:77] + "..."


def main(argv):
    rtol, first, second = float(argv[0]), argv[1], argv[2]
    for path in argv[3:]:
        compare_one(rtol, first, second, path)


def compare_one(rtol, first, second, path):
    """One path's comparison, as one JSON line."""
    import torch

    try:
        a = torch.load(first + "/" + path, map_location="cpu", weights_only=False)
        b = torch.load(second + "/" + path, map_location="cpu", weights_only=False)
    except Exception:
        print(json.dumps({"path": path, "loadable": False}))
        return
    worst = []
    try:
        equal = walk(torch, a, b, "", rtol, worst)
    except Exception as exc:  # what cannot be compared is no match: said, and the other files still compared
        worst.append((float("inf"), f" (not comparable: {type(exc).__name__}: {exc})"[:200]))
        equal = False
    largest = max(worst, default=(0.0, ""), key=lambda leaf: leaf[0])
    # the least --rtol that accepts every value, where each was compared as a number (None: a shape, a key, ...)
    relative = max([leaf[2] if len(leaf) > 2 else float("inf") for leaf in worst], default=0.0)
    # (where every value is equal no key is the largest difference's)
    print(json.dumps({"path": path, "loadable": True, "equal": equal,
                      "max_difference": largest[0] if largest[0] != float("inf") else None,
                      "where": largest[1] if largest[0] else "",
                      "rtol_needed": relative if relative != float("inf") else None}))


if __name__ == "__main__":
    main(sys.argv[1:])
