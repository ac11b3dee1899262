from django import forms


class LaunchForm(forms.Form):
    course = forms.IntegerField(min_value=1)
    template = forms.IntegerField(min_value=1)
