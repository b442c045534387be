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
    skip_damaged = serializers.BooleanField(
        required=False,
        default=False,
        help_text="report on the rest of a log with damaged records (else the "
        "run fails); the summary says how much was skipped",
    )
