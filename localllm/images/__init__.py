"""Image inputs: files a front end attaches (``files``), the header checks done before any
decode (``info``, ``data``, ``heif``) and the formats libmtmd cannot read turned into ones
it can (``convert``)."""
