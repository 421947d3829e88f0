"""Tests for fedpfn.core.data: real Fashion-MNIST plus tiny files written in each on-disk format."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from fedpfn.core import data
from fedpfn.core.data import DEBIAN_FMNIST_DIR, DataError, find_data_problem, load_dataset
from tests.support.cifar import write_cifar
from tests.support.idx import idx_bytes, write_idx_set

needs_debian_fmnist = pytest.mark.skipif(
    not DEBIAN_FMNIST_DIR.is_dir(), reason=f"{DEBIAN_FMNIST_DIR} absent (apt-get install dataset-fashion-mnist)"
)


def unnormalise(x: torch.Tensor, name: str) -> np.ndarray:
    """Recover the uint8 pixels from a normalised tensor (float error is far below 0.5)."""
    mean, std = data._STATS[name]
    m = torch.tensor(mean).view(1, -1, 1, 1)
    s = torch.tensor(std).view(1, -1, 1, 1)
    return torch.round((x * s + m) * 255).to(torch.uint8).numpy()


def check_idx_load(splits: data.DatasetSplits, arrays: dict[str, np.ndarray], name: str) -> None:
    assert splits.input_shape == (1, 28, 28)
    assert splits.num_classes == 10
    assert splits.train_x.dtype == torch.float32 and splits.train_y.dtype == torch.int64
    np.testing.assert_array_equal(unnormalise(splits.train_x, name)[:, 0], arrays["train-images-idx3-ubyte"])
    np.testing.assert_array_equal(unnormalise(splits.test_x, name)[:, 0], arrays["t10k-images-idx3-ubyte"])
    np.testing.assert_array_equal(splits.train_y.numpy(), arrays["train-labels-idx1-ubyte"])
    np.testing.assert_array_equal(splits.test_y.numpy(), arrays["t10k-labels-idx1-ubyte"])


@needs_debian_fmnist
def test_real_fashion_mnist_loads() -> None:
    splits = load_dataset("fmnist")
    assert splits.train_x.shape == (60_000, 1, 28, 28)
    assert splits.test_x.shape == (10_000, 1, 28, 28)
    assert splits.train_y.shape == (60_000,) and splits.test_y.shape == (10_000,)
    assert splits.input_shape == (1, 28, 28) and splits.num_classes == 10
    assert int(splits.train_y.min()) == 0 and int(splits.train_y.max()) == 9
    assert torch.bincount(splits.train_y).tolist() == [6000] * 10
    assert abs(float(splits.train_x.mean())) < 0.01
    assert abs(float(splits.train_x.std()) - 1.0) < 0.01
    assert load_dataset("fmnist") is splits  # cached per process


@pytest.mark.parametrize("gzip_train", [False, True])
def test_idx_files_in_data_root(tmp_path: Path, gzip_train: bool) -> None:
    arrays = write_idx_set(tmp_path, gzip_train=gzip_train)
    check_idx_load(load_dataset("fmnist", str(tmp_path)), arrays, "fmnist")


def test_idx_files_in_torchvision_layout(tmp_path: Path) -> None:
    fmnist = write_idx_set(tmp_path / "FashionMNIST" / "raw", gzip_train=True, seed=1)
    mnist = write_idx_set(tmp_path / "MNIST" / "raw", seed=2)
    check_idx_load(load_dataset("fmnist", str(tmp_path)), fmnist, "fmnist")
    check_idx_load(load_dataset("mnist", str(tmp_path)), mnist, "mnist")


def test_truncated_idx_names_file(tmp_path: Path) -> None:
    write_idx_set(tmp_path)
    path = tmp_path / "t10k-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(DataError, match="t10k-images-idx3-ubyte.*truncated"):
        load_dataset("fmnist", str(tmp_path))


def test_truncated_gzip_names_file(tmp_path: Path) -> None:
    write_idx_set(tmp_path, gzip_train=True)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte\.gz.*truncated gzip"):
        load_dataset("fmnist", str(tmp_path))


def test_wrong_magic_and_count_mismatch(tmp_path: Path) -> None:
    arrays = write_idx_set(tmp_path / "a")
    (tmp_path / "a" / "train-labels-idx1-ubyte").write_bytes(idx_bytes(arrays["train-images-idx3-ubyte"]))
    with pytest.raises(DataError, match="train-labels-idx1-ubyte.*magic"):
        load_dataset("fmnist", str(tmp_path / "a"))
    arrays = write_idx_set(tmp_path / "b")
    (tmp_path / "b" / "train-labels-idx1-ubyte").write_bytes(idx_bytes(arrays["train-labels-idx1-ubyte"][:-1]))
    with pytest.raises(DataError, match="12 images but .* 11 labels"):
        load_dataset("fmnist", str(tmp_path / "b"))


def test_idx_header_whose_dims_overflow_is_refused(tmp_path: Path) -> None:
    """2**31 x 2**31 x 4 wraps to 0 in int64, which once matched an empty payload and crashed in reshape."""
    write_idx_set(tmp_path)
    path = tmp_path / "train-images-idx3-ubyte"
    header = (0x00000803).to_bytes(4, "big") + np.asarray([2**31, 2**31, 4], dtype=">u4").tobytes()
    path.write_bytes(header)
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte: payload is 0 bytes but the header dims "
                                        r"2147483648 x 2147483648 x 4 need 18446744073709551616"):
        load_dataset("fmnist", str(tmp_path))


def test_idx_header_dims_larger_than_the_payload_are_refused(tmp_path: Path) -> None:
    write_idx_set(tmp_path)
    path = tmp_path / "t10k-images-idx3-ubyte"
    raw = path.read_bytes()
    path.write_bytes(raw[:4] + np.asarray([5, 4096, 4096], dtype=">u4").tobytes() + raw[16:])
    with pytest.raises(DataError, match=r"payload is 3920 bytes but the header dims 5 x 4096 x 4096 need 83886080"):
        load_dataset("fmnist", str(tmp_path))


@pytest.mark.parametrize("split, n_train, n_test", [("test", 12, 0), ("train", 0, 5)])
def test_empty_split_is_refused(tmp_path: Path, split: str, n_train: int, n_test: int) -> None:
    write_idx_set(tmp_path, n_train=n_train, n_test=n_test)
    stem = "t10k" if split == "test" else "train"
    with pytest.raises(DataError, match=rf"Fashion-MNIST {split} split is empty \(.*{stem}-images-idx3-ubyte"):
        load_dataset("fmnist", str(tmp_path))


def test_every_dataset_name_has_its_tables() -> None:
    """DATASETS is the one list of names: each has a reader, a title, a class count and statistics."""
    for table in (data._READERS, data._TITLES, data._NUM_CLASSES, data._STATS):
        assert tuple(table) == data.DATASETS


def test_missing_dataset_names_the_ways(tmp_path: Path) -> None:
    with pytest.raises(DataError) as info:
        load_dataset("fmnist", str(tmp_path))
    message = str(info.value)
    assert "sudo apt-get install dataset-fashion-mnist" in message and "--data-root" in message
    assert "\n" not in message
    for name in ("mnist", "cifar10", "cifar100", "svhn"):
        with pytest.raises(DataError, match="--data-root DIR.*--download"):
            load_dataset(name, str(tmp_path))
    with pytest.raises(DataError, match="no --data-root given for CIFAR-10"):
        load_dataset("cifar10")


def test_monkeypatched_missing_debian_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data, "DEBIAN_FMNIST_DIR", tmp_path / "absent")
    assert "apt-get install dataset-fashion-mnist" in (find_data_problem("fmnist", None, False) or "")


@pytest.mark.parametrize(("name", "n_train"), [("cifar10", 5 * 4), ("cifar100", 4)])
def test_tiny_cifar_loads(tmp_path: Path, name: str, n_train: int) -> None:
    train_x, train_y, test_x, test_y = write_cifar(tmp_path, name, per_batch=4, seed=3)
    splits = load_dataset(name, str(tmp_path))
    assert splits.train_x.shape == (n_train, 3, 32, 32) and splits.test_x.shape == (4, 3, 32, 32)
    assert splits.num_classes == data._NUM_CLASSES[name]
    assert splits.train_y.tolist() == train_y and splits.test_y.tolist() == test_y
    # Rows are the red, green and blue 32 x 32 planes in turn.
    np.testing.assert_array_equal(unnormalise(splits.train_x, name), train_x.reshape(-1, 3, 32, 32))
    np.testing.assert_array_equal(unnormalise(splits.test_x, name), test_x.reshape(-1, 3, 32, 32))


def test_cifar_reader_agrees_with_torchvision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Our reader and torchvision's see the same images, once its md5 check is bypassed."""
    import torchvision.datasets
    import torchvision.datasets.cifar

    write_cifar(tmp_path, "cifar10", per_batch=3, seed=4)
    with pytest.raises(RuntimeError, match="not found or corrupted"):
        torchvision.datasets.CIFAR10(str(tmp_path))  # why we read the pickles ourselves
    monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda *args, **kwargs: True)
    reference = torchvision.datasets.CIFAR10(str(tmp_path), train=True)
    splits = load_dataset("cifar10", str(tmp_path))
    np.testing.assert_array_equal(unnormalise(splits.train_x, "cifar10"), reference.data.transpose(0, 3, 1, 2))
    assert splits.train_y.tolist() == reference.targets


def test_corrupt_cifar_batch_names_file(tmp_path: Path) -> None:
    write_cifar(tmp_path, "cifar10", per_batch=2, seed=5)
    path = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(DataError, match="data_batch_3"):
        load_dataset("cifar10", str(tmp_path))


def test_cifar_batch_in_the_official_files_protocol_loads(tmp_path: Path) -> None:
    """The official archives were pickled by Python 2 (protocol 2, numpy.core names)."""
    train_x, train_y, _, _ = write_cifar(tmp_path, "cifar10", per_batch=3, seed=6)
    path = tmp_path / "cifar-10-batches-py" / "data_batch_1"
    entry = {"batch_label": "training batch 1 of 5", "labels": train_y[:3], "data": train_x[:3]}
    old_names = pickle.dumps(entry, protocol=2).replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")
    assert b"cnumpy.core.multiarray\n_reconstruct" in old_names
    path.write_bytes(old_names)
    splits = load_dataset("cifar10", str(tmp_path))
    np.testing.assert_array_equal(unnormalise(splits.train_x, "cifar10"), train_x.reshape(-1, 3, 32, 32))


class _RunsOnLoad:
    """What a tampered batch can hold: pickle.load would call open(marker, "w")."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return open, (str(self.marker), "w")


def test_cifar_batch_naming_any_other_callable_is_refused_before_it_runs(tmp_path: Path) -> None:
    write_cifar(tmp_path, "cifar10", per_batch=2, seed=8)
    path, marker = tmp_path / "cifar-10-batches-py" / "data_batch_2", tmp_path / "marker"
    with path.open("wb") as f:
        pickle.dump({"labels": [0, 1], "data": _RunsOnLoad(marker)}, f)
    with pytest.raises(DataError, match=r"data_batch_2: not a readable CIFAR batch .*io\.open"):
        load_dataset("cifar10", str(tmp_path))
    assert not marker.exists()


def write_svhn(root: Path, n_train: int, n_test: int, seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Tiny SVHN: X is 32 x 32 x 3 x N uint8, y is N x 1 with labels 1..10 (10 is the digit 0)."""
    import scipy.io

    rng = np.random.default_rng(seed)
    written = {}
    for split, n in (("train", n_train), ("test", n_test)):
        x = rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8)
        y = rng.integers(1, 11, (n, 1)).astype(np.uint8)
        y[0, 0] = 10
        scipy.io.savemat(root / f"{split}_32x32.mat", {"X": x, "y": y})
        written[split] = (x, y)
    return written


def test_tiny_svhn_loads(tmp_path: Path) -> None:
    pytest.importorskip("scipy")
    written = write_svhn(tmp_path, n_train=6, n_test=3, seed=6)
    splits = load_dataset("svhn", str(tmp_path))
    assert splits.train_x.shape == (6, 3, 32, 32) and splits.test_x.shape == (3, 3, 32, 32)
    assert splits.num_classes == 10
    for x_tensor, y_tensor, split in ((splits.train_x, splits.train_y, "train"), (splits.test_x, splits.test_y, "test")):
        x, y = written[split]
        np.testing.assert_array_equal(unnormalise(x_tensor, "svhn"), x.transpose(3, 2, 0, 1))
        assert y_tensor.tolist() == [0 if v == 10 else int(v) for v in y[:, 0]]
        assert y_tensor[0] == 0


def test_find_data_problem(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    assert "does not exist" in (find_data_problem("cifar10", str(missing), False) or "")
    assert find_data_problem("cifar10", str(missing), True) is None  # torchvision will create it
    a_file = tmp_path / "file"
    a_file.write_text("")
    assert "not a directory" in (find_data_problem("fmnist", str(a_file), False) or "")
    assert "unknown dataset" in (find_data_problem("imagenet", None, False) or "")
    assert "--download" in (find_data_problem("svhn", str(tmp_path), False) or "")
    assert "no --data-root given" in (find_data_problem("cifar100", None, True) or "")
    write_cifar(tmp_path, "cifar100", per_batch=1, seed=7)
    assert find_data_problem("cifar100", str(tmp_path), False) is None


@needs_debian_fmnist
def test_find_data_problem_accepts_debian_fmnist() -> None:
    assert find_data_problem("fmnist", None, False) is None
    assert find_data_problem("fmnist", None, True) is None


def test_unknown_dataset_raises() -> None:
    with pytest.raises(DataError, match="unknown dataset 'imagenet'.*fmnist, mnist"):
        load_dataset("imagenet")
