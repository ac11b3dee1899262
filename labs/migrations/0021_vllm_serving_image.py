from django.conf import settings
from django.db import migrations, models

import labs.models.catalog


def vllm_runs_in_the_default_image(apps, schema_editor):
    """Allowed vLLM models get the site's serving image (LAB_VLLM_IMAGE), and so do the vLLM
    templates the instructor console stored with an empty image, which no cluster could run."""
    image = settings.LAB_VLLM_IMAGE
    apps.get_model("labs", "AllowedImage").objects.filter(kind="vllm", image="").update(image=image)
    LabTemplate = apps.get_model("labs", "LabTemplate")
    LabTemplate.objects.filter(kind="vllm", image="").update(image=image)
    imageless = list(LabTemplate.objects.filter(image="").values_list("slug", flat=True)[:20])
    if imageless:
        raise RuntimeError(
            "These JupyterLab templates have no container image, which every lab needs: "
            f"{', '.join(imageless)}. Give each one in the database, then migrate again."
        )


class Migration(migrations.Migration):

    dependencies = [
        ("labs", "0020_budget_reasons_say_the_grace"),
    ]

    operations = [
        migrations.AddField(
            model_name="allowedimage",
            name="image",
            field=models.CharField(
                blank=True,
                help_text="vLLM: the container image that serves the model; empty: the site's LAB_VLLM_IMAGE. JupyterLab: empty.",
                max_length=300,
                validators=[labs.models.catalog.validate_image_reference],
                verbose_name="serving image (vLLM)",
            ),
        ),
        migrations.AlterField(
            model_name="labtemplate",
            name="image",
            field=models.CharField(blank=True, max_length=300, verbose_name="container image"),
        ),
        migrations.RunPython(vllm_runs_in_the_default_image, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="allowedimage",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("kind", "vllm"), models.Q(("image", ""), _negated=True)),
                    models.Q(("image", ""), ("kind", "jupyter")),
                    _connector="OR",
                ),
                name="allowed_image_vllm_names_its_image",
                violation_error_message="A vLLM model needs the image that serves it; a JupyterLab image needs none.",
            ),
        ),
        migrations.AddConstraint(
            model_name="labtemplate",
            constraint=models.CheckConstraint(
                condition=models.Q(("image", ""), _negated=True),
                name="template_image_given",
                violation_error_message=(
                    "A lab template needs a container image (a vLLM template: the image that serves its model, "
                    "from the allow-list)."
                ),
            ),
        ),
    ]
