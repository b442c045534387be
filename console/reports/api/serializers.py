from rest_framework import serializers

from console.reports.models import ReportRun


class ReportRunSerializer(serializers.ModelSerializer):
    class Meta:
        model = ReportRun
        fields = [
            "id",
            "report",
            "status",
            "trigger",
            "requested_by",
            "created_at",
            "started_at",
            "finished_at",
            "duration_s",
            "since",
            "skip_damaged",
            "top_n",
            "node",
            "params",
            "window",
            "until",
            "log_end",
            "input_records",
            "rows",
            "summary",
            "error",
        ]


class RunRequestSerializer(serializers.Serializer):
    since = serializers.DateTimeField(required=False, allow_null=True)
    until = serializers.DateTimeField(required=False, allow_null=True)
    top_n = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=1000,
        help_text="rows of the top tables; empty: the report's default",
    )
    node = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=64,
        help_text="a cluster node: the run covers it alone; empty: every node",
    )
    params = serializers.DictField(
        child=serializers.IntegerField(),
        required=False,
        default=dict,
        help_text="the report's own parameters (thresholds), e.g. "
        '{"late_after_ms": 500} for delay_punctuality; empty: its defaults',
    )
    skip_damaged = serializers.BooleanField(
        required=False,
        default=False,
        help_text="report on the rest of a log with damaged records (else the "
        "run fails); the summary says how much was skipped",
    )

    def validate(self, attrs):
        since, until = attrs.get("since"), attrs.get("until")
        if since and until and since >= until:
            raise serializers.ValidationError({"until": ["must be after 'since'"]})
        return attrs

    def validate_node(self, value: str) -> str:
        from console.reports import services

        try:
            return services.check_node(value)
        except services.UnknownNodeError as exc:
            raise serializers.ValidationError(str(exc)) from exc
