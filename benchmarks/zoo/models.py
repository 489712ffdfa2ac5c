"""Imports every builder module so that each registers its models in catalog.REGISTRY.

Builders needing torch / transformers import them inside the build function, so listing the
zoo and building the torch-free part work without them.
"""

from __future__ import annotations

import models_hf  # noqa: F401
import models_hf_fourth  # noqa: F401
import models_hf_more  # noqa: F401
import models_hf_third  # noqa: F401
import models_onnx  # noqa: F401
import models_torch  # noqa: F401
import models_wheels  # noqa: F401
