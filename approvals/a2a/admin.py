"""Remote A2A agents in the Django admin: a tenant admin names an agent, gives its card URL
and, if it needs one, the Authorization header to send (write-only: stored encrypted,
never shown again)."""

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from .models import RemoteAgent


class RemoteAgentForm(forms.ModelForm):
    card_url = forms.URLField(
        max_length=500, assume_scheme="https", help_text=RemoteAgent._meta.get_field("card_url").help_text
    )
    auth_header = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text='The Authorization header value, e.g. "Bearer …". Left empty: kept as it is.',
    )
    clear_auth = forms.BooleanField(required=False, help_text="Send no Authorization header any more.")

    class Meta:
        model = RemoteAgent
        fields = ["tenant", "name", "card_url"]


@admin.register(RemoteAgent)
class RemoteAgentAdmin(admin.ModelAdmin):
    form = RemoteAgentForm
    list_display = ["name", "tenant", "card_url", "has_auth", "updated_at"]
    list_filter = ["tenant"]
    search_fields = ["name", "card_url"]

    @admin.display(boolean=True, description="Auth")
    def has_auth(self, agent: RemoteAgent) -> bool:
        return bool(agent.auth_sealed)

    def save_model(self, request: HttpRequest, obj: RemoteAgent, form: forms.ModelForm, change: bool) -> None:
        if form.cleaned_data.get("clear_auth"):
            obj.auth_sealed = ""
        elif form.cleaned_data.get("auth_header"):
            obj.set_auth_header(form.cleaned_data["auth_header"])
        super().save_model(request, obj, form, change)
