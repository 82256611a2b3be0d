"""Five models from the same blocks: Encoder, Decoder, Seq2Seq, DecoderLM, Classifier."""

from anatomy.models.build import build_model
from anatomy.models.cache import ModelCache
from anatomy.models.classifier import Classifier
from anatomy.models.decoder import Decoder, DecoderStack
from anatomy.models.encoder import Encoder, EncoderStack
from anatomy.models.lm import DecoderLM
from anatomy.models.outputs import ClassifierOutput, EncoderOutput, LMOutput, ModelOutput, Seq2SeqOutput
from anatomy.models.seq2seq import EncoderDecoderStack, Seq2Seq
from anatomy.models.stack import TransformerStack

__all__ = [
    "Classifier",
    "ClassifierOutput",
    "Decoder",
    "DecoderLM",
    "DecoderStack",
    "Encoder",
    "EncoderDecoderStack",
    "EncoderOutput",
    "EncoderStack",
    "LMOutput",
    "ModelCache",
    "ModelOutput",
    "Seq2Seq",
    "Seq2SeqOutput",
    "TransformerStack",
    "build_model",
]
