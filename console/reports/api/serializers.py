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
    skip_damaged = serializers.BooleanField(
        required=False,
        default=False,
        help_text="report on the rest of a log with damaged records (else the "
        "run fails); the summary says how much was skipped",
    )
