"""logscope.verdict"""
