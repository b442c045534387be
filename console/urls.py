"""Top-level URL map; each app adds its pages and its API under /api/."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required, login_required
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from console.core import views as core_views
from console.overview.views import overview

api_patterns = [
    path("", include("console.audit.api.urls")),
    path("", include("console.topics.api.urls")),
    path("", include("console.messages.api.urls")),
    path("", include("console.consumers.api.urls")),
    path("", include("console.delays.api.urls")),
    path("", include("console.transactions.api.urls")),
    path("", include("console.reports.api.urls")),
    path("", include("console.cluster.api.urls")),
]

urlpatterns = [
    path("", overview, name="overview"),
    path("healthz", login_not_required(core_views.healthz), name="healthz"),
    path("node/", core_views.node, name="node"),
    path(
        "login/",
        auth_views.LoginView.as_view(redirect_authenticated_user=True),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("audit/", include("console.audit.urls")),
    path("topics/", include("console.topics.urls")),
    path("messages/", include("console.messages.urls")),
    path("consumer-groups/", include("console.consumers.urls")),
    path("delays/", include("console.delays.urls")),
    path("transactions/", include("console.transactions.urls")),
    path("reports/", include("console.reports.urls")),
    path("cluster/", include("console.cluster.urls")),
    path("users/", include("console.accounts.urls")),
    path("account/", include("console.accounts.account_urls")),
    path("producer-groups/", include("console.transactions.producer_urls")),
    path("api/", include(api_patterns)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # DRF marks its views login_not_required; the docs page is a page, so it
    # sends an anonymous visitor to the sign-in form.
    path(
        "api/docs/",
        login_required(SpectacularSwaggerSplitView.as_view(url_name="schema")),
        name="api-docs",
    ),
]
