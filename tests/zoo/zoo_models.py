"""The transformers zoo: small configurations of real architectures, random weights, nothing downloaded.

Each entry builds one model (eval, float32, dropout off) and the inputs of a call at a given size
index (0, 1, 2: three sequence lengths, audio lengths or batch sizes), so a harness can check outputs
against eager, graph counts against torch.compile's and recompiles across sizes. Sizes keep every
model under a second of eager time on two CPU cores.
"""

import dataclasses
from collections.abc import Callable

import torch

VOCAB = 128
SEQ_LENS = (8, 13, 21)
AUDIO_LENS = (800, 1120, 1600)
BATCHES = (2, 3, 5)


@dataclasses.dataclass(frozen=True)
class ZooModel:
    name: str
    family: str  # decoder, encoder, seq2seq, vision, audio, multimodal
    build: Callable[[], torch.nn.Module]
    inputs: Callable[[int], dict]  # size index -> keyword arguments of forward
    train: bool = False  # one training step checked (every gradient equal to eager)
    generate: bool = False  # model.generate() checked token for token
    fast: bool = False  # part of the subset `nox -s tests` runs


def _small(config_cls, **overrides):
    import transformers

    transformers.logging.set_verbosity_error()  # the default special token ids lie outside VOCAB
    return getattr(transformers, config_cls)(**overrides)


def _model(model_cls: str, config_cls: str, **config) -> Callable[[], torch.nn.Module]:
    def build():
        import transformers

        cfg = _small(config_cls, **config)
        _tokens_in_vocabulary(cfg)
        torch.manual_seed(0)
        model = getattr(transformers, model_cls)(cfg)
        return model.eval()

    return build


def _tokens_in_vocabulary(cfg) -> None:
    """Special token ids inside the small vocabulary (the defaults index a real one)."""
    for config in (cfg, getattr(cfg, "text_config", None)):
        for attr in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"):
            value = getattr(config, attr, None)
            if isinstance(value, int) and value >= VOCAB:
                setattr(config, attr, 2)


def _ids(size: int, batch: int = 2, vocab: int = VOCAB, mask: bool = True) -> dict:
    g = torch.Generator().manual_seed(size)
    length = SEQ_LENS[size]
    ids = torch.randint(3, vocab, (batch, length), generator=g)
    out = {"input_ids": ids}
    if mask:
        out["attention_mask"] = torch.ones(batch, length, dtype=torch.long)
    return out


def _ids_no_mask(size: int) -> dict:
    return _ids(size, mask=False)


def _seq2seq(size: int) -> dict:
    out = _ids(size)
    g = torch.Generator().manual_seed(100 + size)
    out["decoder_input_ids"] = torch.randint(3, VOCAB, (2, SEQ_LENS[size] // 2 + 1), generator=g)
    return out


def _pixels(size: int, image: int = 32, channels: int = 3) -> dict:
    g = torch.Generator().manual_seed(size)
    return {"pixel_values": torch.randn(BATCHES[size], channels, image, image, generator=g)}


def _pixels_sized(size: int) -> dict:
    g = torch.Generator().manual_seed(size)
    side = (32, 48, 64)[size]
    return {"pixel_values": torch.randn(2, 3, side, side, generator=g)}


def _audio(size: int) -> dict:
    g = torch.Generator().manual_seed(size)
    return {"input_values": torch.randn(2, AUDIO_LENS[size], generator=g)}


def _whisper(size: int) -> dict:
    g = torch.Generator().manual_seed(size)
    length = SEQ_LENS[size]
    return {
        "input_features": torch.randn(2, 16, 32, generator=g),
        "decoder_input_ids": torch.randint(3, VOCAB, (2, length), generator=g),
    }


def _clip(size: int) -> dict:
    out = _ids(size)
    g = torch.Generator().manual_seed(200 + size)
    out["pixel_values"] = torch.randn(2, 3, 32, 32, generator=g)
    return out


_DECODER = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
_ENCODER = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=128, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0)
_AUDIO = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
              conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
              num_conv_pos_embedding_groups=2, hidden_dropout=0.0, attention_dropout=0.0,
              activation_dropout=0.0, feat_proj_dropout=0.0, layerdrop=0.0, mask_time_prob=0.0,
              do_stable_layer_norm=False, vocab_size=VOCAB)


MODELS: list[ZooModel] = [
    # decoder language models
    ZooModel("llama", "decoder", _model("LlamaForCausalLM", "LlamaConfig", **_DECODER), _ids,
             train=True, generate=True, fast=True),
    ZooModel("mistral", "decoder", _model("MistralForCausalLM", "MistralConfig", **_DECODER), _ids),
    ZooModel("mixtral", "decoder", _model("MixtralForCausalLM", "MixtralConfig", **_DECODER,
                                          num_local_experts=4, num_experts_per_tok=2), _ids),
    ZooModel("qwen2", "decoder", _model("Qwen2ForCausalLM", "Qwen2Config", **_DECODER), _ids, train=True),
    ZooModel("qwen3", "decoder", _model("Qwen3ForCausalLM", "Qwen3Config", **_DECODER, head_dim=16), _ids),
    ZooModel("gemma", "decoder", _model("GemmaForCausalLM", "GemmaConfig", **_DECODER, head_dim=16), _ids),
    ZooModel("gemma2", "decoder", _model("Gemma2ForCausalLM", "Gemma2Config", **_DECODER, head_dim=16,
                                         sliding_window=8), _ids),
    ZooModel("phi", "decoder", _model("PhiForCausalLM", "PhiConfig", **_DECODER, resid_pdrop=0.0,
                                      embd_pdrop=0.0, attention_dropout=0.0), _ids),
    ZooModel("phi3", "decoder", _model("Phi3ForCausalLM", "Phi3Config", **_DECODER, pad_token_id=0), _ids),
    ZooModel("gpt2", "decoder", _model("GPT2LMHeadModel", "GPT2Config", vocab_size=VOCAB, n_embd=64,
                                       n_layer=2, n_head=4, n_positions=128, resid_pdrop=0.0,
                                       embd_pdrop=0.0, attn_pdrop=0.0), _ids_no_mask,
             train=True, generate=True, fast=True),
    ZooModel("gptj", "decoder", _model("GPTJForCausalLM", "GPTJConfig", vocab_size=VOCAB, n_embd=64,
                                       n_layer=2, n_head=4, rotary_dim=8, n_positions=128,
                                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0), _ids),
    ZooModel("gpt_neox", "decoder", _model("GPTNeoXForCausalLM", "GPTNeoXConfig", vocab_size=VOCAB,
                                           hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                           num_attention_heads=4, max_position_embeddings=128,
                                           hidden_dropout=0.0, attention_dropout=0.0), _ids, train=True),
    ZooModel("opt", "decoder", _model("OPTForCausalLM", "OPTConfig", vocab_size=VOCAB, hidden_size=64,
                                      ffn_dim=128, num_hidden_layers=2, num_attention_heads=4,
                                      word_embed_proj_dim=64, max_position_embeddings=128, dropout=0.0,
                                      attention_dropout=0.0), _ids, generate=True),
    ZooModel("bloom", "decoder", _model("BloomForCausalLM", "BloomConfig", vocab_size=VOCAB,
                                        hidden_size=64, n_layer=2, n_head=4, hidden_dropout=0.0,
                                        attention_dropout=0.0), _ids),
    ZooModel("falcon", "decoder", _model("FalconForCausalLM", "FalconConfig", vocab_size=VOCAB,
                                         hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                         hidden_dropout=0.0, attention_dropout=0.0), _ids),
    # encoders
    ZooModel("bert", "encoder", _model("BertModel", "BertConfig", **_ENCODER), _ids, train=True, fast=True),
    ZooModel("roberta", "encoder", _model("RobertaModel", "RobertaConfig", **_ENCODER, pad_token_id=1),
             _ids, train=True),
    ZooModel("distilbert", "encoder", _model("DistilBertModel", "DistilBertConfig", vocab_size=VOCAB, dim=64,
                                             hidden_dim=128, n_layers=2, n_heads=4, dropout=0.0,
                                             attention_dropout=0.0, max_position_embeddings=128), _ids,
             train=True),
    ZooModel("albert", "encoder", _model("AlbertModel", "AlbertConfig", **_ENCODER, embedding_size=32), _ids),
    ZooModel("deberta_v2", "encoder", _model("DebertaV2Model", "DebertaV2Config", **_ENCODER), _ids),
    ZooModel("electra", "encoder", _model("ElectraModel", "ElectraConfig", **_ENCODER, embedding_size=32),
             _ids, train=True),
    # encoder-decoders
    ZooModel("t5", "seq2seq", _model("T5Model", "T5Config", vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128,
                                     num_layers=2, num_heads=4, dropout_rate=0.0), _seq2seq, train=True),
    ZooModel("bart", "seq2seq", _model("BartModel", "BartConfig", vocab_size=VOCAB, d_model=64,
                                       encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                                       decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                                       max_position_embeddings=128, dropout=0.0, attention_dropout=0.0),
             _seq2seq),
    ZooModel("whisper", "seq2seq", _model("WhisperModel", "WhisperConfig", vocab_size=VOCAB, d_model=64,
                                          encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                                          decoder_attention_heads=4, encoder_ffn_dim=128,
                                          decoder_ffn_dim=128, num_mel_bins=16, max_source_positions=16,
                                          max_target_positions=64, dropout=0.0, attention_dropout=0.0,
                                          pad_token_id=0, decoder_start_token_id=1), _whisper),
    # vision
    ZooModel("vit", "vision", _model("ViTModel", "ViTConfig", hidden_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=128, image_size=32,
                                     patch_size=8, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0), _pixels, train=True),
    ZooModel("deit", "vision", _model("DeiTModel", "DeiTConfig", hidden_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, intermediate_size=128, image_size=32,
                                      patch_size=8, hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0), _pixels),
    ZooModel("swin", "vision", _model("SwinModel", "SwinConfig", image_size=32, patch_size=4, embed_dim=16,
                                      depths=(1, 1), num_heads=(2, 2), window_size=4, hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0, drop_path_rate=0.0), _pixels),
    ZooModel("convnext", "vision", _model("ConvNextModel", "ConvNextConfig", num_channels=3,
                                          hidden_sizes=(16, 32), depths=(1, 1), num_stages=2,
                                          drop_path_rate=0.0), _pixels_sized, fast=True),
    ZooModel("resnet", "vision", _model("ResNetModel", "ResNetConfig", num_channels=3, embedding_size=16,
                                        hidden_sizes=(16, 32), depths=(1, 1), layer_type="basic"),
             _pixels_sized, train=True),
    ZooModel("mobilenet_v2", "vision", _model("MobileNetV2Model", "MobileNetV2Config", num_channels=3,
                                              image_size=32, depth_multiplier=0.25), _pixels_sized),
    # audio
    ZooModel("wav2vec2", "audio", _model("Wav2Vec2Model", "Wav2Vec2Config", **_AUDIO), _audio, fast=True),
    ZooModel("hubert", "audio", _model("HubertModel", "HubertConfig", **_AUDIO), _audio),
    # multimodal
    ZooModel("clip", "multimodal", _model(
        "CLIPModel", "CLIPConfig",
        text_config=dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=64),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=8),
        projection_dim=16), _clip),
]

BY_NAME = {m.name: m for m in MODELS}
