"""Routes the framework has nothing to do for, answered by the guard (``app.Guard``) itself.

A route is lean when its endpoint is ``async``, takes the request and ``str`` path parameters
and nothing else, and has no dependencies: it reads its own body and query (``mounts._body``,
``mounts._query``) and returns a ``Response``. That is every change and every catch-up of a
remote mount or sync worker; its rarer reads (``.history``, an old version) still go through
the framework. For those the framework's per-request work (its exception middleware, its
routing, its parameter machinery, the endpoint's wrappers) is all overhead: ~0.3 ms of a ~1 ms
round trip here, ten times the store call of a ``store_states`` (docs/decisions.md, "The guard
answers lean routes itself").

The framework stays the one description of the API: the routes are its own, matched in its
order by its compiled patterns and convertors; a request whose first full match is not lean,
or that matches only partly (a 405), or nothing (a 404), goes on to the framework untouched;
an exception from a lean endpoint gets the reply of the app's own handler for it.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.routing import APIRoute
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import Receive, Scope, Send


class LeanRoutes:
    """The app's routes in its order, each with whether it is lean (see the module)."""

    def __init__(self, app: FastAPI) -> None:
        self._routes = [(route, _lean(route)) for route in app.router.routes]
        self._handlers = app.exception_handlers

    def find(self, scope: Scope) -> tuple[APIRoute, dict[str, Any]] | None:
        """The lean route that answers this request and its path parameters; None when the
        framework's routing would pick another route, or none."""
        if scope.get("root_path"):
            return None  # served under a prefix: the framework's to strip and match
        path = scope["path"]
        method = scope["method"]
        for route, lean in self._routes:
            regex = getattr(route, "path_regex", None)
            methods = getattr(route, "methods", None)
            if regex is None or methods is None:
                return None  # a mount or a websocket route: the framework's to match
            found = regex.match(path)
            if found is None or method not in methods:
                continue  # no match, or a partial one: a later route may match fully
            if lean is None:
                return None
            params = {k: lean.param_convertors[k].convert(v) for k, v in found.groupdict().items()}
            return lean, params
        return None

    async def answer(
        self, route: APIRoute, params: dict[str, Any], scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Call the endpoint as the framework would; an exception gets its handler's reply."""
        scope["route"] = route
        scope["endpoint"] = route.endpoint
        scope["path_params"] = params
        request = Request(scope, receive, send)
        endpoint: Callable[..., Awaitable[Response]] = route.endpoint
        try:
            response = await endpoint(request, **params)
        except Exception as exc:
            for cls in type(exc).__mro__:
                handler = self._handlers.get(cls)
                if handler is not None:
                    break
            else:  # pragma: no cover (the app has a handler for Exception)
                raise
            handled = handler(request, exc)
            response = await handled if inspect.isawaitable(handled) else handled
        await response(scope, receive, send)


def _lean(route: BaseRoute) -> APIRoute | None:
    """``route`` if it is lean (see the module), else None."""
    if not isinstance(route, APIRoute) or route.dependencies:
        return None
    endpoint = route.endpoint
    if not inspect.iscoroutinefunction(endpoint):
        return None
    try:
        parameters = list(inspect.signature(endpoint, eval_str=True).parameters.values())
    except NameError:  # an annotation that names nothing here: the framework's to read
        return None
    if not parameters or parameters[0].annotation is not Request:
        return None
    rest = parameters[1:]
    if {p.name for p in rest} != set(route.param_convertors):
        return None
    plain = inspect.Parameter.POSITIONAL_OR_KEYWORD
    if any(p.annotation is not str or p.default is not p.empty or p.kind != plain for p in rest):
        return None
    return route
