"""A vLLM template must launch ``vllm serve MODEL``; any other command serves the wrong model."""

import pytest
from django.core.exceptions import ValidationError

from labs.models import LabTemplate
from tests.factories import TemplateFactory


@pytest.mark.django_db
@pytest.mark.parametrize(
    "command",
    [["python", "-m", "vllm.entrypoints.openai.api_server"], ["python3", "-m", "vllm"], ["vllm"], ["serve", "vllm"]],
)
def test_a_vllm_template_with_another_launcher_is_refused_naming_vllm_serve(command):
    template = TemplateFactory.build(kind=LabTemplate.Kind.VLLM, command=command)

    with pytest.raises(ValidationError) as caught:
        template.full_clean(exclude=["institution"])

    assert "vllm serve MODEL" in " ".join(caught.value.message_dict["command"])


@pytest.mark.django_db
@pytest.mark.parametrize("command", [[], ["vllm", "serve"], ["vllm", "serve", "--trust-remote-code"]])
def test_a_vllm_template_that_launches_vllm_serve_is_valid(command):
    TemplateFactory.build(kind=LabTemplate.Kind.VLLM, command=command).full_clean(exclude=["institution"])


@pytest.mark.django_db
def test_a_jupyter_template_may_use_any_command():
    TemplateFactory.build(kind=LabTemplate.Kind.JUPYTER, command=["python", "-m", "jupyterlab"]).full_clean(
        exclude=["institution"]
    )


@pytest.mark.django_db
def test_a_command_that_is_not_a_list_of_strings_is_refused():
    template = TemplateFactory.build(kind=LabTemplate.Kind.VLLM, command="vllm serve")

    with pytest.raises(ValidationError, match="list of strings"):
        template.full_clean(exclude=["institution"])
