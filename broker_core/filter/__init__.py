"""Message filters: RocketMQ's SQL92 selector language.

``compile(expression) -> Selector``; ``Selector.evaluate(properties)`` returns
True, False or None; ``Selector.matches(properties)`` is True only for TRUE.
``build_matcher(expression_type, expression)`` is the predicate a pull uses.
See docs/filter.md.
"""

from broker_core.filter.selector import (
    SQL92,
    TAG,
    Matcher,
    Selector,
    build_matcher,
    cache_info,
    clear_cache,
    compile,
)

__all__ = [
    "SQL92",
    "TAG",
    "Matcher",
    "Selector",
    "build_matcher",
    "cache_info",
    "clear_cache",
    "compile",
]
