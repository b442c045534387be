"""``GET /api/reports/`` (latest run of each), ``GET /api/report-runs/``,
``GET /api/report-runs/{id}/``, ``GET /api/report-runs/{id}/trend/`` (that run
and the runs like it before it, figure by figure), ``POST
/api/reports/{name}/run/`` (operator)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import generics, status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from console.reports import comparisons, services
from console.reports.api.serializers import ReportRunSerializer, RunRequestSerializer
from console.reports.catalog import REPORTS
from console.reports.models import ReportRun
from console.ui.permissions import HasRole
from console.ui.roles import OPERATOR, VIEWER


class ReportListView(APIView):
    permission_classes = [HasRole]
    read_role = VIEWER

    @extend_schema(responses=dict)
    def get(self, request):
        out = []
        for name, info in REPORTS.items():
            latest = services.latest_run(name)
            out.append(
                {
                    "name": name,
                    "title": info.title,
                    "tables": list(info.tables),
                    "latest": ReportRunSerializer(latest).data if latest else None,
                }
            )
        return Response(out)


class RunListView(generics.ListAPIView):
    permission_classes = [HasRole]
    read_role = VIEWER
    serializer_class = ReportRunSerializer
    filterset_fields = ["report", "status", "trigger"]
    queryset = ReportRun.objects.all()


class RunDetailView(generics.RetrieveAPIView):
    permission_classes = [HasRole]
    read_role = VIEWER
    serializer_class = ReportRunSerializer
    queryset = ReportRun.objects.all()


class RunTrendView(APIView):
    permission_classes = [HasRole]
    read_role = VIEWER

    @extend_schema(responses=dict)
    def get(self, request, pk: int):
        run = ReportRun.objects.filter(pk=pk).first()
        if run is None:
            raise NotFound(f"no report run {pk}")
        if run.status != ReportRun.Status.SUCCEEDED:
            raise NotFound(f"run {pk} did not succeed: it has no figures")
        return Response(comparisons.trend(run))


class RunNowView(APIView):
    permission_classes = [HasRole]
    write_role = OPERATOR

    @extend_schema(request=RunRequestSerializer, responses=ReportRunSerializer)
    def post(self, request, name: str):
        if name not in REPORTS:
            raise NotFound(f"no report {name!r}")
        body = RunRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            run = services.request_run(
                name,
                actor=request.user,
                params=body.validated_data.get("params") or {},
                request=request,
                **services.run_options(body.validated_data),
            )
        except services.ParamError as exc:
            raise ValidationError({"params": [str(exc)]}) from exc
        return Response(ReportRunSerializer(run).data, status=status.HTTP_202_ACCEPTED)
