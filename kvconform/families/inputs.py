"""Synthetic inputs per family (no download).

- text: seeded random token ids that avoid every special id the config names (image, BOS, …);
- images: what the model's own image processor makes of a synthetic image (``processors``), else
  ``pixel_values`` of the tower's image size (or Qwen-VL-style flattened patches with a
  ``image_grid_thw`` grid); as many image tokens in the prompt as the tower yields features;
- speech: ``input_features`` with the config's feature width (mel bins or per-channel features)
  and the frame count its positions ask for, or raw ``input_values``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from kvconform.build.models import Model
from kvconform.families.decoders import image_cross_attention
from kvconform.families.image_layouts import ImageLayout, processor_layout
from kvconform.families.processors import NoImageProcessor, processed_images, video_processor_class
from kvconform.families.registry import image_placeholders

#: Grid of image patches per image (before any merge of neighbouring patches).
GRID = 4
#: Frames of speech features when the config does not fix them, and raw samples for waveform inputs.
SPEECH_FRAMES = 32
SPEECH_SAMPLES = 3200


#: The ids a model's processor wraps an image's placeholders in, by the config fields that name them: Qwen-VL-style
#: ``<|vision_start|>`` … ``<|vision_end|>`` (processing_qwen2_vl.py), GLM-4V's and ERNIE's image start/end, Gemma 3's
#: ``<start_of_image>`` … ``<end_of_image>`` (boi/eoi, processing_gemma3.py). Older releases find the images by the start
#: id (Qwen2-VL's ``get_rope_index`` and beam expansion before 5.18).
IMAGE_DELIMITERS = (("vision_start_token_id", "vision_end_token_id"), ("image_start_token_id", "image_end_token_id"),
                    ("boi_token_id", "eoi_token_id"), ("image_start_id", "image_end_id"))


def image_delimiters(config: Any) -> tuple[list[int], list[int]]:
    """The ids before and after an image's placeholders, as the model's processor writes them (none where the config
    names no start id)."""
    for start, end in IMAGE_DELIMITERS:
        first, last = getattr(config, start, None), getattr(config, end, None)
        if isinstance(first, int) and not isinstance(first, bool):
            return [first], [last] if isinstance(last, int) and not isinstance(last, bool) else []
    given = image_placeholders(getattr(config, "model_type", ""))  # a processor's own ids (IDEFICS), families.yaml
    return [int(i) for i in given.get("before", [])], [int(i) for i in given.get("after", [])]


def special_token_ids(config: Any) -> set[int]:
    """Every id the config (or a sub-config) names in a ``*_token_id``/``*_token_index``/``*_token_ids`` field."""
    found: set[int] = set()
    values = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    stack = [values]
    while stack:
        current = stack.pop()
        for key, value in current.items():
            if isinstance(value, dict):
                stack.append(value)
            elif isinstance(key, str) and key.endswith(("_token_id", "_token_index", "_token_ids", "_token_idx")):
                items = value if isinstance(value, list) else [value]
                found.update(v for v in items if isinstance(v, int) and not isinstance(v, bool) and v >= 0)
    return found


def text_ids(batch: int, length: int, seed: int, vocab_size: int, forbidden: set[int]) -> torch.Tensor:
    """Seeded random ids in ``[3, vocab)`` that are no special id (a random image token would ask for an image)."""
    allowed = torch.tensor([i for i in range(3, max(4, min(vocab_size, 32000))) if i not in forbidden])
    generator = torch.Generator().manual_seed(seed)
    return allowed[torch.randint(len(allowed), (batch, length), generator=generator)]


def _accepts(model: Model, name: str) -> bool:
    return name in inspect.signature(model.forward).parameters


@dataclass
class MediaInputs:
    """Inputs for one image or waveform per row, the placeholder id and how many placeholders each row needs."""

    tensors: dict[str, torch.Tensor]
    token_id: int | None
    """The placeholder id (``None`` where the decoder reads the image by cross-attention: no placeholders)."""
    tokens_per_row: int
    recipe: str

    attends: bool = True
    """False for the blank image a text-only prompt carries where the forward needs one (IDEFICS): no position attends it."""
    layout: ImageLayout | None = None
    """The processor's ids for one image where they are more than placeholders between delimiters (Molmo2)."""

    def row(self, before: list[int], after: list[int]) -> list[int]:
        """One item's ids in a prompt: the processor's layout, else the placeholders between ``before`` and ``after``."""
        if self.layout is not None:
            return list(self.layout.ids)
        return [*before, *([self.token_id] * self.tokens_per_row if self.token_id is not None else []), *after]

    def closing(self, after: list[int]) -> list[int]:
        """The ids the processor writes after an item's last placeholder."""
        if self.layout is None:
            return after
        last = max(k for k, i in enumerate(self.layout.ids) if i == self.token_id)
        return self.layout.ids[last + 1 :]

    def for_sequence(self, model: Model, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """The image inputs plus what the sequence needs beside them (modality ids for multimodal rotary positions)."""
        extra = {}
        marked = sorted(self.layout.marked) if self.layout is not None else [self.token_id if self.token_id is not None else -1]
        marks = torch.isin(input_ids, torch.tensor(marked, device=input_ids.device)).int()  # no placeholder: none marked
        if _accepts(model, "mm_token_type_ids"):
            extra["mm_token_type_ids"] = marks
        if _accepts(model, "image_embeds_position_mask"):  # Kosmos-2 marks the image's positions, not its ids
            extra["image_embeds_position_mask"] = marks
        if _accepts(model, IMAGE_ATTENTION_MASK):  # IDEFICS: each position attends to the image from its <image> on
            extra[IMAGE_ATTENTION_MASK] = (marks.cumsum(-1) > 0).long()[..., None] * int(self.attends)
        return {**self.tensors, **extra}

    def for_step(self, model: Model, batch: int, length: int = 1) -> dict[str, torch.Tensor]:
        """What a decode step gives the forward beside its token: nothing where the image is in the cache; where the forward
        reads the image at every position (IDEFICS' cross-attention keeps no cache) the image again and the ``length`` new
        tokens' rows of the image mask, as generate() carries them (modeling_idefics.py:1224-1233: the last row; the tower's output of
        the prefill, the same values as the pixels give again)."""
        if not _accepts(model, IMAGE_ATTENTION_MASK):
            return {}
        images = self.tensors["pixel_values"].shape[1]
        row = torch.full((batch, length, images), int(self.attends), device=self.tensors["pixel_values"].device)
        return {**self.tensors, IMAGE_ATTENTION_MASK: row}

    def blank(self) -> MediaInputs:
        """The inputs of a prompt without an image where the forward still needs one: zero pixels no position attends
        (IdeficsProcessor's text-only prompts: processing_idefics.py:408, 426-431)."""
        return replace(self, tensors={k: torch.zeros_like(v) if v.is_floating_point() else v for k, v in self.tensors.items()},
                       attends=False, recipe="a text-only prompt: zero pixels, an all-zero image_attention_mask")


#: IDEFICS' per-position image mask ``[B, S, images]`` (its forward reads the image through gated cross-attention).
IMAGE_ATTENTION_MASK = "image_attention_mask"


def needs_an_image(model: Model) -> bool:
    """Whether the forward runs only with an image, a text-only prompt carrying a blank one (IDEFICS: modeling_idefics.py:955-957
    raises without pixel_values, :990 without image_attention_mask)."""
    return _accepts(model, IMAGE_ATTENTION_MASK)


#: Kosmos-2's processor fills the image's positions with ids from ``unk_token_id + 1`` on
#: (``processing_kosmos2.py:229``; unk is 3 in its XLM-R tokenizer); its model reads only the position mask.
KOSMOS2_FIRST_IMAGE_TOKEN = 4


def image_token_id(config: Any, video: bool = False) -> int:
    """The placeholder id of the visual input: the image's, or the video's where the tower reads only videos."""
    names = ("video_token_id", "video_token_index") if video else ("image_token_id", "image_token_index", "image_token")
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    given = image_placeholders(getattr(config, "model_type", ""))  # a processor's own id (IDEFICS), families.yaml
    if not video and isinstance(given.get("image"), int):
        return int(given["image"])
    if not video and getattr(config, "latent_query_num", None) is not None:
        return KOSMOS2_FIRST_IMAGE_TOKEN
    raise ValueError(f"{type(config).__name__} names no {' / '.join(names[:2])}")


#: Frames per video where the tower reads only videos (the model has ``get_video_features`` and no image getter):
#: InstructBLIP-Video's processor and ``generate()`` take 4 (processing_instructblipvideo.py:104,127 "InstrucBLIP works with
#: 4 frames only": ``num_query_tokens * 4`` placeholders; modeling_instructblipvideo.py:1310), as its tests do.
VIDEO_FRAMES = 4


def video_only(model: Model) -> bool:
    """Whether the model's visual input is a video ``[B, frames, C, H, W]``: it has a video getter and no image one."""
    owners = [model, getattr(model, "model", None)]
    has = {name for name in ("get_image_features", "get_video_features") for owner in owners if hasattr(owner, name)}
    return has == {"get_video_features"}


def _vision_config(config: Any) -> Any:
    vision = getattr(config, "vision_config", None)
    if vision is None:
        raise ValueError(f"{type(config).__name__} has no vision_config")
    return vision


def _first(config: Any, *names: str) -> Any:
    return next((getattr(config, n) for n in names if getattr(config, n, None) is not None), None)


def image_inputs(model: Model, batch: int, seed: int) -> MediaInputs:
    """One synthetic image per row as the model's image processor makes it (else shaped from the config),
    and its number of image tokens (the features the tower makes of it)."""
    device = next(p.device for p in model.parameters())
    try:
        if video_only(model):  # a video tower: its video processor, not an image processor
            video_processor_class(model.config.model_type)
        tensors, recipe = processed_images(model, batch, seed)
    except NoImageProcessor as exc:
        return _config_shaped(model, batch, seed, f"no {'video' if video_only(model) else 'image'} processor ({exc}): ")
    # An image processor's attention_mask is its patch mask (Kosmos-2.5's flattened patches); a decoder-only forward's
    # attention_mask is the text's, which replaces it in the processor's output (processing_kosmos2_5.py:77 then :95-99 update the
    # image encoding with the tokenizer's input_ids and attention_mask), as it replaces it here (the prompt's own mask).
    if tensors.pop("attention_mask", None) is not None:
        recipe += " (its attention_mask, a patch mask, replaced by the prompt's as the processor replaces it)"
    tensors = {k: v.to(device) for k, v in {**tensors, **_query_text(model, batch, seed)}.items()}
    if image_cross_attention(model) is not None:  # its decoder reads the image by cross-attention, not from placeholders
        return MediaInputs(tensors, None, 0, f"{recipe}, read by the text decoder's cross-attention (no placeholders)")
    if _accepts(model, IMAGE_ATTENTION_MASK):  # one <image> per image, read by cross-attention over its mask (IDEFICS)
        if tensors["pixel_values"].dim() == 4:  # its processor stacks each prompt's images: [B, images, C, H, W]
            tensors["pixel_values"] = tensors["pixel_values"][:, None]  # (processing_idefics.py:401-416)
        images = int(tensors["pixel_values"].shape[1])
        return MediaInputs(tensors, image_token_id(model.config), images,
                           f"{recipe}, [B, {images}, C, H, W] per prompt, read by cross-attention over image_attention_mask")
    layout = processor_layout(model.config, tensors)
    return MediaInputs(tensors, image_token_id(model.config, video_only(model)), count_features(model, tensors) // batch, recipe,
                       layout=layout)


#: Tokens of the instruction InstructBLIP's processor also gives its Q-Former (``qformer_input_ids``).
QFORMER_TOKENS = 4


def _query_text(model: Model, batch: int, seed: int) -> dict[str, torch.Tensor]:
    """The Q-Former's own tokenization of the prompt (InstructBLIP), as random ids of its vocabulary."""
    if not _accepts(model, "qformer_input_ids"):
        return {}
    vocab = int(model.config.qformer_config.vocab_size)
    ids = text_ids(batch, QFORMER_TOKENS, seed + 4, vocab, special_token_ids(model.config.qformer_config))
    return {"qformer_input_ids": ids, "qformer_attention_mask": torch.ones_like(ids)}


def _config_shaped(model: Model, batch: int, seed: int, why: str) -> MediaInputs:
    """Pixels in the layout the forward asks for, shaped from the config alone."""
    config = model.config
    vision = _vision_config(config)
    generator = torch.Generator().manual_seed(seed + 1)
    channels = int(_first(vision, "num_channels", "in_channels", "in_chans") or 3)
    patch = int(_first(vision, "patch_size") or 8)
    dtype = next(model.parameters()).dtype
    if _accepts(model, "image_grid_thw"):
        temporal = int(_first(vision, "temporal_patch_size", "patch_temporal") or 1)
        pixels = torch.randn(batch * GRID * GRID, channels * temporal * patch * patch, generator=generator)
        tensors = {"pixel_values": pixels.to(dtype), "image_grid_thw": torch.tensor([[1, GRID, GRID]] * batch)}
        recipe = f"flattened {GRID}x{GRID} patches with image_grid_thw"
    elif _accepts(model, "spatial_shapes") and _accepts(model, "pixel_attention_mask"):
        # Siglip2's NaFlex layout (LFM2-VL): flattened patches padded to a row, each row's patch grid and patch mask, as
        # its processor makes them (image_processing_lfm2_vl_fast.py:521-550 in 5.3.0)
        pixels = torch.randn(batch, GRID * GRID, channels * patch * patch, generator=generator)
        tensors = {"pixel_values": pixels.to(dtype), "spatial_shapes": torch.tensor([[GRID, GRID]] * batch),
                   "pixel_attention_mask": torch.ones(batch, GRID * GRID, dtype=torch.long)}
        recipe = f"flattened {GRID}x{GRID} patches with spatial_shapes and pixel_attention_mask"
    elif _accepts(model, "image_grid_hw"):  # the same without the temporal axis (NemotronH Omni's processor layout)
        pixels = torch.randn(batch * GRID * GRID, channels * patch * patch, generator=generator)
        tensors = {"pixel_values": pixels.to(dtype), "image_grid_hw": torch.tensor([[GRID, GRID]] * batch)}
        recipe = f"flattened {GRID}x{GRID} patches with image_grid_hw"
    else:
        size = _first(vision, "image_size")
        size = int(size[0] if isinstance(size, (list, tuple)) else size or GRID * patch)
        frames = [VIDEO_FRAMES] if video_only(model) else []
        tensors = {"pixel_values": torch.randn(batch, *frames, channels, size, size, generator=generator).to(dtype)}
        recipe = f"pixel_values [B, {''.join(f'{f} frames, ' for f in frames)}{channels}, {size}, {size}]"
    if not _accepts(model, "pixel_values") and _accepts(model, "pixel_values_images"):
        tensors["pixel_values_images"] = tensors.pop("pixel_values")  # video_llava before transformers 5.24
        recipe = recipe.replace("pixel_values", "pixel_values_images")
    device = next(p.device for p in model.parameters())
    tensors = {k: v.to(device) for k, v in {**tensors, **_query_text(model, batch, seed)}.items()}
    try:
        count = count_features(model, tensors)
    except Exception:
        if "image_grid_thw" in tensors or "image_grid_hw" in tensors or not _accepts(model, "image_sizes"):
            raise
        # Towers of any size (Pixtral) need each image's size; others reject the argument.
        tensors["image_sizes"] = torch.tensor([list(tensors["pixel_values"].shape[-2:])] * batch, device=device)
        count = count_features(model, tensors)
        recipe += " with image_sizes"
    return MediaInputs(tensors, image_token_id(config, video_only(model)), count // batch, why + recipe)


def count_features(model: Model, tensors: dict[str, torch.Tensor], getter_name: str | None = None) -> int:
    """How many feature vectors the tower makes of ``tensors`` in all (one image, video or audio token each); the
    getter is the image one unless named (or the video one of a tower that reads only videos)."""
    getter_name = getter_name or ("get_video_features" if video_only(model) else "get_image_features")
    getter = getattr(model, getter_name, None) or getattr(getattr(model, "model", None), getter_name, None)
    queries = getattr(model.config, "latent_query_num", None)
    if getter is None and queries is not None:  # Kosmos-2(.5) before its getter: latent_query_num queries an image
        return int(queries) * len(next(iter(tensors.values())))
    if getter is None:
        raise ValueError(f"{type(model).__name__} has no {getter_name} to count the tower's features with")
    names = _named(getter)
    inner = getattr(getattr(model, "model", None), getter_name, None)
    if inner is not None and "kwargs" in inspect.signature(getter).parameters:
        names |= _named(inner)  # a forwarder passes **kwargs on to the inner model's (image_merge_sizes)
    output = getter(**{k: v for k, v in tensors.items() if k in names})
    features = getattr(output, "pooler_output", None)
    layered = getattr(output, "deepstack_features", None)
    if features is None and isinstance(layered, (list, tuple)) and layered:
        # Only (decoder layer, per-image features) pairs, every pair one row per placeholder: the forward places the
        # first pair's (Granite4Vision, modeling_granite4_vision.py:1000-1006) and its generate() counts them so (:1208).
        features = layered[0][1]
    features = output if features is None else features
    if isinstance(features, torch.Tensor):
        return int(features.reshape(-1, features.shape[-1]).shape[0])
    return sum(int(f.reshape(-1, f.shape[-1]).shape[0]) for f in features)


def _named(function: Any) -> set[str]:
    """The parameters of ``function`` that have names (not ``*args``/``**kwargs``)."""
    kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return {n for n, p in inspect.signature(function).parameters.items() if p.kind not in kinds}


def encoder_config(config: Any) -> Any:
    """The encoder's sub-config of a composite config, else the flat config."""
    for name in ("encoder", "encoder_config", "audio_config"):
        sub = getattr(config, name, None)
        if sub is not None and hasattr(sub, "to_dict"):
            return sub
    return config


@dataclass
class EncoderInputs:
    """What the encoder reads, and how it was shaped."""

    tensors: dict[str, torch.Tensor]
    recipe: str
    extra: dict[str, Any] = field(default_factory=dict)


#: Encoder inputs that carry an image (pixels, or Pix2Struct's flattened patches).
IMAGE_INPUTS = ("pixel_values", "flattened_patches")


def image_encoder_inputs(model: Model, batch: int, length: int, seed: int, forbidden: set[int]) -> EncoderInputs:
    """An image encoder-decoder's encoder inputs: the image as its processor makes it (else pixels shaped from the
    encoder's config) and, where the encoder reads text with the image merged in (Florence-2), a prompt with one
    placeholder per image feature. Masks the processor makes (Pix2Struct's patch mask) go to every call."""
    device = next(p.device for p in model.parameters())
    try:
        tensors, recipe = processed_images(model, batch, seed)
    except NoImageProcessor as exc:
        vision = getattr(model.config, "vision_config", None) or getattr(model.config, "encoder", None)
        size, channels = int(_first(vision, "image_size") or 32), int(_first(vision, "num_channels") or 3)
        generator = torch.Generator().manual_seed(seed + 1)
        pixels = torch.randn(batch, channels, size, size, generator=generator).to(next(model.parameters()).dtype)
        tensors, recipe = {"pixel_values": pixels}, f"no image processor ({exc}): pixel_values [B, {channels}, {size}, {size}]"
    tensors = {k: v.to(device) for k, v in tensors.items()}
    encoder = model.get_encoder()
    if not _accepts(model, "input_ids") or not {"input_ids", "inputs_embeds"} & _named(encoder.forward):
        # The encoder reads the image alone; an outer forward's input_ids only make decoder ids (PP-FormulaNet:
        # shift_tokens_right when no decoder_input_ids are given, modeling_pp_formulanet.py:991-992).
        return EncoderInputs(tensors, recipe)
    vocab = int(model.config.get_text_config(decoder=True).vocab_size)
    text = text_ids(batch, length, seed + 2, vocab, forbidden).to(device)
    try:
        token = image_token_id(model.config)
    except ValueError:  # the image goes beside the text, not into placeholders (UDOP)
        boxes = _word_boxes(batch, length, seed) if _accepts(model, "bbox") else {}
        placed = f" with a word box each (bbox [B, {length}, 4])" if boxes else ""
        # The text's attention_mask, as the tokenizer returns it (UdopTokenizer.model_input_names): the encoder extends
        # it over the image patches and masks the slots it pads where a token's box took a patch
        # (combine_image_text_embeddings, modeling_udop.py:200-221 in 5.1.0); without one, every slot is attended.
        # generate() infers a ones mask for an encoder-decoder up to 5.1 (generation/utils.py:2530 in 5.1.0) and none
        # from 5.2 on (:2555 in 5.2.0): given, every release and the uncached reference read the same encoder input.
        return EncoderInputs({"input_ids": text, "attention_mask": torch.ones_like(text), **tensors,
                              **{k: v.to(device) for k, v in boxes.items()}},
                             f"{recipe}; input_ids [B, {length}]{placed} and the text's attention_mask")
    count = count_features(model, tensors) // batch
    ids = torch.cat([torch.full((batch, count), token, device=device), text], dim=1)
    # The processor's attention_mask over the placeholders and the text (Florence2Processor's and T5Gemma2's tokenizers
    # return one), as users pass the processor's output: generate() infers a ones mask for an encoder-decoder up to 5.1
    # and none from 5.2 on (UDOP's note above), so without one the calls from 5.2 on ran a path users do not take (the
    # chunked prefill's cut of the encoder mask, generation/utils.py:3880 in 5.2.0, never met T5Gemma2's merged attention).
    return EncoderInputs({"input_ids": ids, "attention_mask": torch.ones_like(ids), **tensors},
                         f"{recipe}; {count} image tokens before {length} text tokens, and the text's attention_mask")


#: The scale of the word boxes a layout tokenizer gives each token (UdopTokenizer: "normalized to be on a 0-1000 scale").
BOX_SCALE = 1000


def _word_boxes(batch: int, length: int, seed: int) -> dict[str, torch.Tensor]:
    """One box per text token where the image is placed by each token's box (UDOP merges the patch under a token's box
    into it, modeling_udop.py:173-200): its tokenizer gives every token its word's (x0, y0, x1, y1) on the 0-1000 scale;
    seeded boxes with x0 <= x1 and y0 <= y1, as transformers' own UdopModelTester draws them (float, range 1000)."""
    generator = torch.Generator().manual_seed(seed + 5)
    corners = torch.randint(BOX_SCALE, (batch, length, 2, 2), generator=generator).float()
    low, high = corners.min(dim=2).values, corners.max(dim=2).values
    return {"bbox": torch.cat([low, high], dim=-1)}


def encoder_inputs(model: Model, batch: int, length: int, seed: int, forbidden: set[int]) -> EncoderInputs:
    """Random token ids (text), the image (``image_encoder_inputs``) or features/waveforms shaped from the config
    (speech) for ``model.main_input_name``."""
    config = model.config
    name = getattr(model.get_encoder(), "main_input_name", None) or model.main_input_name
    if name in IMAGE_INPUTS or _accepts(model, "pixel_values"):
        return image_encoder_inputs(model, batch, length, seed, forbidden)
    generator = torch.Generator().manual_seed(seed + 2)
    device = next(p.device for p in model.parameters())
    dtype = next(model.parameters()).dtype
    encoder = encoder_config(config)
    if name == "input_ids":
        vocab = int(_first(encoder, "vocab_size") or _first(config, "vocab_size"))
        ids = text_ids(batch, length, seed + 2, vocab, forbidden)
        return EncoderInputs({"input_ids": ids.to(device)}, f"input_ids [B, {length}]")
    if name == "input_values":
        wave = torch.randn(batch, SPEECH_SAMPLES, generator=generator)
        return EncoderInputs({"input_values": wave.to(device, dtype)}, f"input_values [B, {SPEECH_SAMPLES}] (waveform)")
    if name != "input_features":
        raise ValueError(f"{type(model).__name__}: no synthetic encoder input for main_input_name {name!r}")
    width = _first(encoder, "num_mel_bins", "input_feat_per_channel", "feature_size", "input_dim", "feature_projection_input_dim")
    if width is None:
        raise ValueError(f"{type(config).__name__}: no feature width (num_mel_bins, input_feat_per_channel, feature_size)")
    width = int(width) * int(_first(encoder, "input_channels") or 1)
    if _first(encoder, "num_mel_bins") is not None and _channels_first(model.get_encoder(), width):
        # Whisper-style [B, features, frames]: two convolutions (stride 1, 2) make max_source_positions positions.
        source = _first(encoder, "max_source_positions")
        frames = 2 * int(source) if source else SPEECH_FRAMES
        features = torch.randn(batch, width, frames, generator=generator)
        return EncoderInputs({"input_features": features.to(device, dtype)}, f"input_features [B, {width}, {frames}]")
    features = torch.randn(batch, SPEECH_FRAMES, width, generator=generator)
    return EncoderInputs({"input_features": features.to(device, dtype)}, f"input_features [B, {SPEECH_FRAMES}, {width}]")


def _channels_first(encoder: Model, width: int) -> bool:
    """Whether the encoder's first layer is a 1-D convolution over ``width`` mel channels ([B, features, frames]);
    Speech2Text's convolutions also read per-channel features but transpose [B, frames, features] themselves."""
    first = next((m for m in encoder.modules() if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Linear))), None)
    return isinstance(first, torch.nn.Conv1d) and first.in_channels == width
