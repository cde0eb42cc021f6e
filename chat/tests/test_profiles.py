"""The chat profile follows the bundled model in use (llm/bundled_models.py), unless
CHAT_PROFILE says otherwise or another model serves."""
import pytest

from chat.turn import PROFILES, profile


@pytest.mark.parametrize(("model", "expected"), [("smollm2-135m", "small"), ("qwen2.5-0.5b", "medium"),
                                                 ("qwen2.5-1.5b", "medium")])
def test_the_bundled_model_picks_its_profile(settings, model, expected):
    settings.LLM_BUNDLED, settings.LOCAL_CHAT_MODEL_PATH, settings.CHAT_PROFILE = True, "", ""
    settings.LOCAL_CHAT_MODEL = model
    assert profile() is PROFILES[expected]


def test_a_gguf_path_or_a_provider_is_trusted_as_capable(settings):
    settings.CHAT_PROFILE, settings.LOCAL_CHAT_MODEL = "", "smollm2-135m"
    settings.LLM_BUNDLED, settings.LOCAL_CHAT_MODEL_PATH = True, "/models/any.gguf"
    assert profile().name == "capable"
    settings.LLM_BUNDLED, settings.LOCAL_CHAT_MODEL_PATH = False, ""
    assert profile().name == "capable"


def test_chat_profile_wins(settings):
    settings.LLM_BUNDLED, settings.LOCAL_CHAT_MODEL_PATH, settings.LOCAL_CHAT_MODEL = True, "", "qwen2.5-0.5b"
    settings.CHAT_PROFILE = "small"
    assert profile().name == "small"


def test_the_medium_profile_checks_what_it_says_against_the_passages():
    medium = PROFILES["medium"]
    assert medium.strict and medium.passages == 3 and not medium.rewrite
    assert medium.max_tokens > PROFILES["small"].max_tokens
