"""Backends as plugins: the contract a distribution implements, and finding and choosing one.

:mod:`._spec` is the plugin contract (the hook, :class:`~eventapi.BackendSpec`,
:class:`~eventapi.BackendInfo`, ``PLUGIN_API``); :mod:`._plugin` is one plugin, and running its
import, hook and probe into a row; :mod:`._discovery` finds the installed plugins through their
entry points, keeps the backends given in code (:func:`eventapi.register_backend`), runs each
plugin once on a thread of its own, and lists them (:func:`eventapi.backends`);
:mod:`._quarantine` remembers a plugin that crashed a process its code ran in (and only that: a
process ended from outside is no crash), telling the two apart by running the plugin alone in a
separate process (:mod:`._alone`); :mod:`._selection` turns a name (or ``EVENTAPI_BACKEND``, or
nothing) into one cached backend object per device (:func:`eventapi.backend`); :mod:`._host`
registers the embedded ``host`` backend through the same hook as any plugin.

Nothing here imports a driver binding or the handle layer; a backend is imported by its
``load``.
"""
