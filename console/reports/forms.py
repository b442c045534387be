from django import forms
from django.conf import settings

from console.reports.catalog import REPORTS, WINDOWS


class NodeField(forms.CharField):
    """A cluster node's name ("": every node)."""

    def __init__(self, **kwargs):
        super().__init__(required=False, max_length=64, **kwargs)

    def validate(self, value):
        from console.reports import services

        super().validate(value)
        try:
            services.check_node(value or "")
        except services.UnknownNodeError as exc:
            raise forms.ValidationError(str(exc)) from exc


class NodeFormMixin:
    """The node field: a list of the nodes when ``CLUSTER_NODES`` names them,
    none on a single host (nothing to choose)."""

    def __init__(self, *args, **kwargs):
        from console.reports import services

        super().__init__(*args, **kwargs)
        if not services.cluster_mode():
            del self.fields["node"]
        elif settings.CLUSTER_NODES:
            choices = [("", "every node")] + [(n, n) for n in settings.CLUSTER_NODES]
            self.fields["node"].widget = forms.Select(choices=choices)


class ParamFieldsMixin:
    """A field per parameter of the form's report (``catalog.Param``), named
    ``param_<name>``; empty: the report's default."""

    PREFIX = "param_"

    def __init__(self, *args, report: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        for param in REPORTS[report].params if report else ():
            self.fields[self.PREFIX + param.name] = forms.IntegerField(
                required=False,
                min_value=param.minimum,
                max_value=param.maximum,
                label=param.label,
                help_text=f"{param.help} Empty: {param.default:,}.",
            )

    def report_params(self) -> dict[str, int]:
        """The parameters given (cleaned), by their names."""
        return {
            key[len(self.PREFIX) :]: value
            for key, value in self.cleaned_data.items()
            if key.startswith(self.PREFIX) and value is not None
        }


class RunForm(ParamFieldsMixin, NodeFormMixin, forms.Form):
    since = forms.DateTimeField(required=False, help_text="UTC; empty: from the start")
    until = forms.DateTimeField(required=False, help_text="UTC; empty: to the end")
    top_n = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=1000,
        label="Top N",
        help_text="Rows of the top tables (tags, keys, longest pending); "
        "empty: the report's default.",
    )
    node = NodeField(
        label="Node",
        help_text="The run covers this cluster node alone; empty: every node.",
    )
    skip_damaged = forms.BooleanField(
        required=False,
        label="Skip damaged records",
        help_text="By default a run over a log with damaged records fails; "
        "with this it reports on the rest and says how much it skipped.",
    )

    def clean(self):
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and since >= until:
            raise forms.ValidationError("'since' must be before 'until'.")
        return data


class ScheduleForm(ParamFieldsMixin, NodeFormMixin, forms.Form):
    enabled = forms.BooleanField(required=False)
    every_minutes = forms.IntegerField(min_value=1, max_value=7 * 24 * 60)
    top_n = forms.IntegerField(required=False, min_value=1, max_value=1000)
    node = NodeField(label="Node")
    alert_figure = forms.CharField(
        required=False,
        max_length=64,
        label="Alert when figure",
        help_text="A summary figure (e.g. max_lag_ms); with a value below, "
        "each run above it is announced like a failure.",
    )
    alert_above = forms.FloatField(required=False, label="is above")
    window = forms.ChoiceField(
        choices=list(WINDOWS.items()),
        initial="all",
        required=False,
        label="Each run covers",
        help_text="A rolling window, computed when the run starts; each run "
        "is compared with the previous run over the same window.",
    )
