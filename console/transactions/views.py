"""Transaction pages: pending and discarded lists, a half's page, and the
actions — roll back, resume (operator), commit (admin), bulk roll back."""

from __future__ import annotations

import json

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from broker_core.errors import BrokerError, UnknownTransactionError
from broker_core.transaction import EndTransactionStatus, TransactionState
from console.core.paging import INVALID_PAGE, MAX_PAGE
from console.transactions import services
from console.transactions.forms import (
    BulkRollbackForm,
    CommitForm,
    HalfFilterForm,
    OptionalReasonForm,
    ReasonForm,
)
from console.ui.body import view_body
from console.ui.pagination import DEFAULT_PAGE_SIZE, PAGE_SIZES
from console.ui.permissions import operator_required, viewer_required
from console.ui.roles import can_see_bodies, has_role


class _Counted(list):
    """A page's items with the index's total, for Django's Paginator."""

    def __init__(self, items, total):
        super().__init__(items)
        self.total = total


def _page(request: HttpRequest, fs: HalfFilterForm):
    try:
        number = max(1, int(request.GET.get("page", 1)))
        size = int(request.GET.get("per_page", DEFAULT_PAGE_SIZE))
    except ValueError:
        number, size = 1, DEFAULT_PAGE_SIZE
    size = size if size in PAGE_SIZES else DEFAULT_PAGE_SIZE
    if number > MAX_PAGE:  # no list is that long: not asked of the node
        raise Http404(INVALID_PAGE)
    res = services.list_transactions(page=number, page_size=size, **fs.list_kwargs())
    total = res.total or 0
    # Paginator needs the full length; fill it with the page at its position.
    pager = Paginator(range(total), size)
    page = pager.get_page(number)
    page.object_list = res.items
    return page


def _list(request: HttpRequest, default_state: str, template: str) -> HttpResponse:
    fs = HalfFilterForm(request.GET or None, default_state=default_state)
    if fs.is_bound and not fs.is_valid():
        # Nothing listed, so nothing to act on: the filter is refused, never
        # dropped (the list and "every half matching" would cover every half).
        page = Paginator([], DEFAULT_PAGE_SIZE).get_page(1)
        page.object_list = []
        sort = "born"
    else:
        page = _page(request, fs)
        sort = fs.list_kwargs()["sort"]
    return render(
        request,
        template,
        {
            "filter": fs,
            "filter_error": fs.error_text() if fs.is_bound else "",
            "page": page,
            "sort": sort,
            "stuck_ids": {
                i.transaction_id for i in page.object_list if services.is_stuck(i)
            },
            "stuck_age_s": services.stuck_thresholds()[0],
            "stuck_checks": services.stuck_thresholds()[1],
            "bulk_max": services.BULK_MAX,
        },
    )


@viewer_required
def pending_list(request: HttpRequest) -> HttpResponse:
    return _list(request, "PENDING", "transactions/half_list.html")


@viewer_required
def discarded_list(request: HttpRequest) -> HttpResponse:
    return _list(request, "DISCARDED", "transactions/discarded_list.html")


@viewer_required
def half_detail(request: HttpRequest, transaction_id: str) -> HttpResponse:
    try:
        half = services.get_transaction(transaction_id)
    except UnknownTransactionError as exc:
        raise Http404(str(exc)) from exc
    show_body = can_see_bodies(request.user)
    return render(
        request,
        "transactions/half.html",
        {
            "half": half,
            "info": half.info,
            "stuck": services.is_stuck(half.info),
            "properties": dict(sorted(half.properties.items())),
            "body": view_body(half.body) if show_body else None,
            "pending": half.info.state == TransactionState.PENDING,
            "discarded": half.info.state == TransactionState.DISCARDED,
            "reason_form": ReasonForm(),
            "commit_form": CommitForm(),
        },
    )


def _back(request: HttpRequest, transaction_id: str) -> HttpResponse:
    nxt = request.POST.get("next", "")
    if nxt and url_has_allowed_host_and_scheme(nxt, allowed_hosts={request.get_host()}):
        return redirect(nxt)
    return redirect("transactions:detail", transaction_id=transaction_id)


#: The form each verb's POST must pass.
_FORMS = {"commit": CommitForm, "rollback": ReasonForm, "resume": OptionalReasonForm}


def _report(request: HttpRequest, verb: services.Verb, tid: str, result) -> None:
    if isinstance(result, TransactionState):  # resume
        messages.success(request, f"{verb.done} {tid}: it will be checked again.")
    elif result.status == EndTransactionStatus.RESOLVED:
        messages.success(request, f"{verb.done} {tid}.")
    else:
        who = f" by {result.operator}" if result.operator else ""
        messages.warning(
            request,
            f"{tid} was already {result.state.value.lower()}"
            f" ({result.source.value.lower() if result.source else '?'}{who}); "
            "nothing changed.",
        )


@require_POST
@viewer_required
def act(request: HttpRequest, transaction_id: str, verb: str) -> HttpResponse:
    """Commit, roll back or resume one half (``services.VERBS``), audited."""
    v = services.VERBS.get(verb)
    if v is None:
        raise Http404(f"no action {verb!r}")
    if not has_role(request.user, v.role):
        raise PermissionDenied(f"This needs the {v.role} role.")
    form = _FORMS[v.name](request.POST)
    failed = f"Not {v.done.lower()}"
    if not form.is_valid():
        messages.error(
            request,
            f"{failed}: " + " ".join(e for errs in form.errors.values() for e in errs),
        )
        return _back(request, transaction_id)
    try:
        result = services.perform(
            v,
            actor=request.user,
            request=request,
            transaction_id=transaction_id,
            reason=form.cleaned_data["reason"],
        )
    except BrokerError as exc:
        messages.error(request, f"{failed}: {exc}")
    else:
        _report(request, v, transaction_id, result)
    return _back(request, transaction_id)


@require_POST
@operator_required
def bulk_rollback(request: HttpRequest) -> HttpResponse:
    form = BulkRollbackForm(request.POST)
    back = request.POST.get("next") or reverse("transactions:list")
    if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
        back = reverse("transactions:list")
    if not form.is_valid():
        messages.error(request, "Nothing rolled back: a reason is required.")
        return redirect(back)
    if form.cleaned_data["all_matching"]:
        try:
            filters = json.loads(request.POST.get("filters") or "{}")
        except ValueError:
            filters = None
        if not isinstance(filters, dict):
            messages.error(request, "Nothing rolled back: the filter was unreadable.")
            return redirect(back)
        fs = HalfFilterForm(filters)
        if not fs.is_valid():
            messages.error(
                request,
                f"Nothing rolled back: the filter is invalid ({fs.error_text()}).",
            )
            return redirect(back)
        kwargs = fs.list_kwargs()
        kwargs["state"] = "PENDING" if kwargs["state"] != "DISCARDED" else "DISCARDED"
        try:
            # Within an audited action: a node away is a FAILED record.
            ids = services.audited_matching_ids(
                actor=request.user,
                request=request,
                reason=form.cleaned_data["reason"],
                **kwargs,
            )
        except BrokerError as exc:
            from console.cluster.nodes import describe

            messages.error(request, f"Nothing rolled back: {describe(exc)}")
            return redirect(back)
    else:
        ids = request.POST.getlist("ids")
    if not ids:
        messages.error(request, "Nothing selected.")
        return redirect(back)
    res = services.bulk_rollback(
        actor=request.user,
        request=request,
        transaction_ids=ids,
        reason=form.cleaned_data["reason"],
    )
    messages.success(request, f"Rolled back {len(res.rolled_back)} half message(s).")
    if res.already:
        messages.warning(request, f"{len(res.already)} were already rolled back.")
    if res.failed:
        messages.error(
            request,
            f"{len(res.failed)} not rolled back: "
            + "; ".join(list(res.failed.values())[:3]),
        )
    return redirect(back)
