"""nn.Module architectures for the zoo's torch builders (models_torch.py imports this lazily).

Written here because torchvision is not a dependency; layouts follow torchvision's (ResNet
Bottleneck, DenseNet, MobileNetV3, ShuffleNetV2, EfficientNet, SqueezeNet, VGG, Inception)
and wav2vec2's conv feature extractor.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# ---- ResNet-50 (torchvision layout) ---------------------------------------------------------


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample  # defined after the main branch, as in torchvision
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet50(nn.Module):
    def __init__(self, layers=(3, 4, 6, 3), classes=1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(64, layers[0])
        self.layer2 = self._make_layer(128, layers[1], 2)
        self.layer3 = self._make_layer(256, layers[2], 2)
        self.layer4 = self._make_layer(512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(2048, classes)

    def _make_layer(self, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * 4:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * 4, 1, stride, bias=False),
                nn.BatchNorm2d(planes * 4))
        layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * 4
        layers += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# ---- DenseNet ---------------------------------------------------------------------------------


class DenseLayer(nn.Module):
    def __init__(self, cin, growth, bn_size=4):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, 1, 1, bias=False)

    def forward(self, feats):
        x = self.conv1(F.relu(self.norm1(torch.cat(feats, 1))))
        return self.conv2(F.relu(self.norm2(x)))


class DenseBlock(nn.ModuleDict):
    def __init__(self, n, cin, growth):
        super().__init__({f"denselayer{i + 1}": DenseLayer(cin + i * growth, growth)
                          for i in range(n)})

    def forward(self, x):
        feats = [x]
        for layer in self.values():
            feats.append(layer(feats))
        return torch.cat(feats, 1)


class DenseNet(nn.Module):
    def __init__(self, blocks=(6, 12, 24, 16), growth=32, init=64, classes=1000):
        super().__init__()
        f = [nn.Conv2d(3, init, 7, 2, 3, bias=False), nn.BatchNorm2d(init), nn.ReLU(True),
             nn.MaxPool2d(3, 2, 1)]
        c = init
        for i, n in enumerate(blocks):
            f.append(DenseBlock(n, c, growth))
            c += n * growth
            if i != len(blocks) - 1:
                f += [nn.BatchNorm2d(c), nn.ReLU(True), nn.Conv2d(c, c // 2, 1, bias=False),
                      nn.AvgPool2d(2, 2)]
                c //= 2
        f.append(nn.BatchNorm2d(c))
        self.features = nn.Sequential(*f)
        self.classifier = nn.Linear(c, classes)

    def forward(self, x):
        x = F.adaptive_avg_pool2d(F.relu(self.features(x)), (1, 1))
        return self.classifier(torch.flatten(x, 1))


# ---- MobileNetV3-small / EfficientNet-B0 (squeeze-excitation families) ----------------------


def _div(v, d=8):
    n = max(d, int(v + d / 2) // d * d)
    return n + d if n < 0.9 * v else n


class SqueezeExcitation(nn.Module):
    def __init__(self, cin, csq, act=nn.ReLU, gate=nn.Sigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1, self.fc2 = nn.Conv2d(cin, csq, 1), nn.Conv2d(csq, cin, 1)
        self.activation, self.scale_activation = act(), gate()

    def forward(self, x):
        s = self.fc2(self.activation(self.fc1(self.avgpool(x))))
        return x * self.scale_activation(s)


def cna(cin, cout, k, s=1, groups=1, act=nn.ReLU):
    layers = [nn.Conv2d(cin, cout, k, s, (k - 1) // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout, eps=1e-3)]
    return nn.Sequential(*layers, act()) if act else nn.Sequential(*layers)


class MBV3Block(nn.Module):
    def __init__(self, cin, k, exp, cout, se, act, s):
        super().__init__()
        self.use_res = s == 1 and cin == cout
        layers = [] if exp == cin else [cna(cin, exp, 1, act=act)]
        layers.append(cna(exp, exp, k, s, exp, act))
        if se:
            layers.append(SqueezeExcitation(exp, _div(exp // 4), gate=nn.Hardsigmoid))
        layers.append(cna(exp, cout, 1, act=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        y = self.block(x)
        return y + x if self.use_res else y


class MobileNetV3Small(nn.Module):
    CFG = [(16, 3, 16, 16, True, "RE", 2), (16, 3, 72, 24, False, "RE", 2),
           (24, 3, 88, 24, False, "RE", 1), (24, 5, 96, 40, True, "HS", 2),
           (40, 5, 240, 40, True, "HS", 1), (40, 5, 240, 40, True, "HS", 1),
           (40, 5, 120, 48, True, "HS", 1), (48, 5, 144, 48, True, "HS", 1),
           (48, 5, 288, 96, True, "HS", 2), (96, 5, 576, 96, True, "HS", 1),
           (96, 5, 576, 96, True, "HS", 1)]

    def __init__(self, classes=1000):
        super().__init__()
        layers = [cna(3, 16, 3, 2, act=nn.Hardswish)]
        for cin, k, exp, cout, se, a, s in self.CFG:
            layers.append(MBV3Block(cin, k, exp, cout, se, nn.Hardswish if a == "HS" else nn.ReLU,
                                    s))
        layers.append(cna(96, 576, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(), nn.Dropout(0.2),
                                        nn.Linear(1024, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class MBConv(nn.Module):
    def __init__(self, cin, cout, k, s, expand):
        super().__init__()
        exp = cin * expand
        self.use_res = s == 1 and cin == cout
        layers = [] if exp == cin else [cna(cin, exp, 1, act=nn.SiLU)]
        layers += [cna(exp, exp, k, s, exp, nn.SiLU),
                   SqueezeExcitation(exp, max(1, cin // 4), act=nn.SiLU),
                   cna(exp, cout, 1, act=None)]
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        y = self.block(x)
        return y + x if self.use_res else y


class EfficientNetB0(nn.Module):
    CFG = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2),
           (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4),
           (6, 3, 1, 192, 320, 1)]

    def __init__(self, classes=1000):
        super().__init__()
        layers = [cna(3, 32, 3, 2, act=nn.SiLU)]
        for e, k, s, cin, cout, n in self.CFG:
            layers.append(nn.Sequential(*[MBConv(cin if i == 0 else cout, cout, k,
                                                 s if i == 0 else 1, e) for i in range(n)]))
        layers.append(cna(320, 1280, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# ---- ShuffleNetV2 ---------------------------------------------------------------------------


def channel_shuffle(x, groups: int):
    b, c, h, w = x.size()
    x = x.view(b, groups, c // groups, h, w).transpose(1, 2).contiguous()
    return x.view(b, -1, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.stride = stride
        bf = cout // 2
        if stride > 1:
            self.branch1 = nn.Sequential(cna(cin, cin, 3, stride, cin, None),
                                         cna(cin, bf, 1))
        else:
            self.branch1 = nn.Sequential()
        self.branch2 = nn.Sequential(cna(cin if stride > 1 else bf, bf, 1),
                                     cna(bf, bf, 3, stride, bf, None), cna(bf, bf, 1))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, repeats=(4, 8, 4), chans=(24, 116, 232, 464, 1024), classes=1000):
        super().__init__()
        self.conv1 = cna(3, chans[0], 3, 2)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        c, stages = chans[0], []
        for n, cout in zip(repeats, chans[1:4]):
            stages.append(nn.Sequential(*[ShuffleUnit(c if i == 0 else cout, cout,
                                                      2 if i == 0 else 1) for i in range(n)]))
            c = cout
        self.stages = nn.Sequential(*stages)
        self.conv5 = cna(c, chans[-1], 1)
        self.fc = nn.Linear(chans[-1], classes)

    def forward(self, x):
        x = self.conv5(self.stages(self.maxpool(self.conv1(x))))
        return self.fc(x.mean([2, 3]))


# ---- SqueezeNet 1.1, VGG, Inception-like ----------------------------------------------------


class Fire(nn.Module):
    def __init__(self, cin, sq, e1, e3):
        super().__init__()
        self.squeeze = nn.Conv2d(cin, sq, 1)
        self.expand1x1, self.expand3x3 = nn.Conv2d(sq, e1, 1), nn.Conv2d(sq, e3, 3, padding=1)

    def forward(self, x):
        x = F.relu(self.squeeze(x))
        return torch.cat([F.relu(self.expand1x1(x)), F.relu(self.expand3x3(x))], 1)


class SqueezeNet(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        mp = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, 2), nn.ReLU(True), mp(), Fire(64, 16, 64, 64),
            Fire(128, 16, 64, 64), mp(), Fire(128, 32, 128, 128), Fire(256, 32, 128, 128), mp(),
            Fire(256, 48, 192, 192), Fire(384, 48, 192, 192), Fire(384, 64, 256, 256),
            Fire(512, 64, 256, 256))
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(512, classes, 1),
                                        nn.ReLU(True), nn.AdaptiveAvgPool2d((1, 1)))

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


class VGG(nn.Module):
    def __init__(self, cfg=(16, "M", 32, "M", 64, 64, "M", 128, 128, "M", 128, 128, "M"),
                 classes=100):
        super().__init__()
        layers, c = [], 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(c, v, 3, padding=1), nn.BatchNorm2d(v), nn.ReLU(True)]
                c = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((3, 3))
        self.classifier = nn.Sequential(nn.Linear(c * 9, 512), nn.ReLU(True), nn.Dropout(),
                                        nn.Linear(512, 512), nn.ReLU(True), nn.Dropout(),
                                        nn.Linear(512, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class InceptionBlock(nn.Module):
    def __init__(self, cin, c1, c3r, c3, c5r, c5, cp):
        super().__init__()
        self.branch1 = cna(cin, c1, 1)
        self.branch2 = nn.Sequential(cna(cin, c3r, 1), cna(c3r, c3, 3))
        self.branch3 = nn.Sequential(cna(cin, c5r, 1), cna(c5r, c5, 3), cna(c5, c5, 3))
        self.branch4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), cna(cin, cp, 1))

    def forward(self, x):
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1)


class InceptionNet(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(cna(3, 64, 7, 2), nn.MaxPool2d(3, 2, ceil_mode=True),
                                  cna(64, 64, 1), cna(64, 192, 3),
                                  nn.MaxPool2d(3, 2, ceil_mode=True))
        self.inc3 = nn.Sequential(InceptionBlock(192, 64, 96, 128, 16, 32, 32),
                                  InceptionBlock(256, 128, 128, 192, 32, 96, 64))
        self.pool = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.inc4 = nn.Sequential(InceptionBlock(480, 192, 96, 208, 16, 48, 64),
                                  InceptionBlock(512, 160, 112, 224, 24, 64, 64))
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.inc4(self.pool(self.inc3(self.stem(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# ---- Segmentation: UNet encoder, FPN-style decoder ------------------------------------------


class SegNet(nn.Module):
    def __init__(self, classes=21, w=(32, 64, 128, 256)):
        super().__init__()
        self.enc = nn.ModuleList()
        c = 3
        for i, o in enumerate(w):
            self.enc.append(nn.Sequential(cna(c, o, 3, 1 if i == 0 else 2), cna(o, o, 3)))
            c = o
        self.lat = nn.ModuleList(nn.Conv2d(o, 64, 1) for o in w)
        self.up3 = nn.ConvTranspose2d(64, 64, 2, 2)  # learned 2x upsampling
        self.fuse = nn.ModuleList(cna(128, 64, 3) for _ in range(3))
        self.head = nn.Sequential(cna(64 * 4, 64, 3), nn.Conv2d(64, classes, 1))

    def forward(self, x):
        feats = []
        for e in self.enc:
            x = e(x)
            feats.append(x)
        p = self.lat[3](feats[3])
        outs = [p]
        # top-down: ConvTranspose, nearest, bilinear (align_corners False), then True
        for i, mode in zip((2, 1, 0), ("convT", "nearest", "bilinear")):
            if mode == "convT":
                up = self.up3(p)
            elif mode == "nearest":
                up = F.interpolate(p, scale_factor=2.0, mode="nearest")
            else:
                up = F.interpolate(p, size=feats[i].shape[-2:], mode="bilinear",
                                   align_corners=False)
            p = self.fuse[i](torch.cat([up, self.lat[i](feats[i])], 1))
            outs.append(p)
        size = outs[-1].shape[-2:]
        merged = [F.interpolate(o, size=size, mode="bilinear", align_corners=True)
                  for o in outs[:-1]] + [outs[-1]]
        return self.head(torch.cat(merged, 1))


# ---- 1-D audio conv encoder (wav2vec2 feature extractor + projection + pos-conv) -------------


class AudioEncoder(nn.Module):
    def __init__(self, dim=256, hidden=192, layers=((10, 5),) + ((3, 2),) * 4 + ((2, 2),) * 2):
        super().__init__()
        convs, c = [], 1
        for i, (k, s) in enumerate(layers):
            norm = nn.GroupNorm(dim, dim) if i == 0 else nn.Identity()
            convs.append(nn.Sequential(nn.Conv1d(c, dim, k, s, bias=False), norm, nn.GELU()))
            c = dim
        self.conv_layers = nn.Sequential(*convs)
        self.layer_norm = nn.LayerNorm(dim)
        self.projection = nn.Linear(dim, hidden)
        self.pos_conv = nn.Conv1d(hidden, hidden, 32, padding=16, groups=8)
        self.out_norm = nn.LayerNorm(hidden)

    def forward(self, wav):
        x = self.conv_layers(wav[:, None, :]).transpose(1, 2)  # [B, T, C]
        x = self.projection(self.layer_norm(x))
        pos = F.gelu(self.pos_conv(x.transpose(1, 2))[:, :, :-1]).transpose(1, 2)
        return self.out_norm(x + pos)


# ---- GQA decoder (Llama-style) -----------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rope(x, cos, sin):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return x * cos + torch.cat((-x2, x1), -1) * sin


class GQAAttention(nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.h, self.kv, self.hd = heads, kv_heads, dim // heads
        self.q_proj = nn.Linear(dim, heads * self.hd, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.o_proj = nn.Linear(heads * self.hd, dim, bias=False)

    def forward(self, x, cos, sin, bias):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        rep = self.h // self.kv
        k = k[:, :, None].expand(b, self.kv, rep, t, self.hd).reshape(b, self.h, t, self.hd)
        v = v[:, :, None].expand(b, self.kv, rep, t, self.hd).reshape(b, self.h, t, self.hd)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.hd) + bias, -1)
        return self.o_proj((att @ v).transpose(1, 2).reshape(b, t, -1))


class DecoderLayer(nn.Module):
    def __init__(self, dim, heads, kv_heads, ffn):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(dim), RMSNorm(dim)
        self.self_attn = GQAAttention(dim, heads, kv_heads)
        self.gate_proj = nn.Linear(dim, ffn, bias=False)
        self.up_proj = nn.Linear(dim, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, dim, bias=False)

    def forward(self, x, cos, sin, bias):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, bias)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class GQADecoder(nn.Module):
    def __init__(self, vocab=2000, dim=256, layers=4, heads=8, kv_heads=2, ffn=688,
                 max_len=128, theta=10000.0):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(DecoderLayer(dim, heads, kv_heads, ffn) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        hd = dim // heads
        inv = 1.0 / theta ** (torch.arange(0, hd, 2).float() / hd)
        ang = torch.outer(torch.arange(max_len).float(), inv)
        ang = torch.cat((ang, ang), -1)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(self, input_ids, attention_mask):
        t = input_ids.shape[1]
        x = self.embed_tokens(input_ids)
        cos, sin = self.cos[:t], self.sin[:t]
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        keep = causal[None, None] & attention_mask[:, None, None, :].bool()
        bias = torch.zeros(keep.shape, dtype=x.dtype).masked_fill(~keep, -1e9)
        for layer in self.layers:
            x = layer(x, cos, sin, bias)
        return self.lm_head(self.norm(x))


# ---- byte CNN, recurrent text classifier ------------------------------------------------------


class ByteCNN(nn.Module):
    def __init__(self, emb=32, width=128, classes=64):
        super().__init__()
        self.embedding = nn.Embedding(257, emb)  # 256 byte values + padding token
        self.convs = nn.Sequential(
            nn.Conv1d(emb, width, 8, 4), nn.ReLU(), nn.Conv1d(width, width, 5, 2, 2),
            nn.BatchNorm1d(width), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(width, width, 3, 1, 1), nn.ReLU())
        self.head = nn.Sequential(nn.LayerNorm(2 * width), nn.Linear(2 * width, 128),
                                  nn.Tanh(), nn.Linear(128, classes))

    def forward(self, byte_ids):
        x = self.convs(self.embedding(byte_ids).transpose(1, 2))
        pooled = torch.cat([x.amax(-1), x.mean(-1)], 1)
        return self.head(pooled)


class RNNClassifier(nn.Module):
    def __init__(self, vocab=5000, emb=64, hidden=96, classes=5):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb, padding_idx=0)
        self.lstm = nn.LSTM(emb, hidden, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(2 * hidden, hidden, batch_first=True)
        self.fc = nn.Linear(hidden * 2, classes)

    def forward(self, input_ids, attention_mask):
        m = attention_mask[..., None].to(torch.float32)
        x, _ = self.lstm(self.embedding(input_ids))
        x, h = self.gru(x)
        pooled = (x * m).sum(1) / m.sum(1).clamp(min=1.0)
        return self.fc(torch.cat([pooled, h[-1]], 1))
