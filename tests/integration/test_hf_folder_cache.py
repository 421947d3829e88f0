"""`--dataset hf:FOLDER` reads the user's folder without writing into their Hugging Face cache
(issue 58): `datasets` kept its copy of the folder there, even for a dataset fedpfn then refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr_datasets")


def parquet_folder(folder: Path, columns: tuple[str, str]) -> Path:
    """train.parquet and test.parquet of 8 x 8 grey images, 3 classes, under `columns`' names."""
    from datasets import ClassLabel, Dataset, Features, Image
    from PIL import Image as PILImage

    rng = np.random.default_rng(0)
    folder.mkdir()
    for split, n in (("train", 20), ("test", 10)):
        images = [PILImage.fromarray(rng.integers(0, 255, (8, 8), dtype=np.uint8)) for _ in range(n)]
        features = Features({columns[0]: Image(), columns[1]: ClassLabel(num_classes=3)})
        data = Dataset.from_dict({columns[0]: images, columns[1]: rng.integers(0, 3, n)}, features=features)
        data.to_parquet(folder / f"{split}.parquet")
    return folder


@pytest.mark.parametrize("columns", [("image", "label"), ("picture", "target")], ids=["read", "refused"])
def test_a_dataset_folder_leaves_the_hugging_face_cache_untouched(columns, tmp_path: Path, monkeypatch) -> None:
    import datasets.config

    from fedpfn.core.formats import DataError
    from fedpfn.core.hf_data import hf_arrays

    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)  # where datasets writes by default
    folder = parquet_folder(tmp_path / "my_set", columns)
    if columns == ("image", "label"):
        train_x, train_y, test_x, test_y = hf_arrays(f"hf:{folder}")
        assert train_x.shape == (20, 1, 8, 8) and len(test_y) == 10 and set(train_y) <= {0, 1, 2}
    else:
        with pytest.raises(DataError, match="has columns picture, target"):
            hf_arrays(f"hf:{folder}")
    assert not cache.exists() or not any(cache.rglob("*"))
