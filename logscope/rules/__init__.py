"""logscope.rules"""
