"""The static HTML report of a series (``materialize report``): ``collect`` gathers plain data from the
series, a manifest, the run ledger, a bisect state and the serving profiles; ``svg`` draws the charts;
``render`` fills the Jinja2 templates in ``templates/`` into one self-contained page; ``cli`` is the
command. A consumer only: it never applies patches or publishes an output."""
